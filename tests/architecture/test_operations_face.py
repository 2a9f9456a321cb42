"""Other apps reach operations through its face, and never its outbox row.

operations/services.py is what other apps call (start, find a live one,
wake a waiting one, end one); the engine behind it (the outbox, the
attempts, the sweep, the operator's settling) is the app's own to change.
So a change to how operations wait or retry stays inside operations/:
these tests fail on another app that imports the engine, queries the
operations table, or names a column of the outbox row. import-linter keeps
the engine's modules from the other apps too (pyproject.toml).
"""

import ast
from pathlib import Path

import grimp

from tests.architecture.test_layers import PACKAGES, ROOT

# Every package of the project but operations itself.
APPS = [package for package in PACKAGES if package != "operations"]
# What other apps may import of operations: its face, the kinds' registry
# they register with, what a handler raises, the row they are handed, and
# how an operation is shown in their answers.
FACE = {
    "operations.services",
    "operations.registry",
    "operations.errors",
    "operations.models",
    "operations.serializers",
    "operations.replay",
}
# The columns by which the outbox records its messages and its workers' claims.
OUTBOX_COLUMNS = {"published_at", "publications", "republish_at", "claimed_until"}


def test_other_apps_import_only_the_face_of_operations() -> None:
    graph = grimp.build_graph("operations", *APPS, include_external_packages=False)
    imported = {
        (importer, imported)
        for app in APPS
        for importer in graph.find_children(app) | graph.find_descendants(app) | {app}
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported.split(".")[0] == "operations"
    }

    assert {target for _, target in imported} <= FACE, sorted(
        (importer, target) for importer, target in imported if target not in FACE
    )


def _app_modules() -> list[Path]:
    return [
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
    ]


def test_no_other_app_queries_the_operations_table() -> None:
    found = []
    for path in _app_modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in {"objects", "_default_manager", "_base_manager"}
                and isinstance(node.value, ast.Name)
                and node.value.id == "Operation"
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")

    assert found == []


def test_no_other_app_names_a_column_of_the_outbox_row() -> None:
    found = []
    for path in _app_modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.keyword) and node.arg is not None:
                names.append(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.append(node.value)
            elif isinstance(node, ast.Attribute):
                names.append(node.attr)
            if any(name.split("__")[0] in OUTBOX_COLUMNS for name in names):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")

    assert found == []


def test_the_check_sees_what_it_looks_for() -> None:
    # The last two tests pass on an empty list of modules too: the
    # operations' own modules show both, as the others must not.
    engine = ast.parse((ROOT / "operations" / "services.py").read_text())
    attributes = {node.attr for node in ast.walk(engine) if isinstance(node, ast.Attribute)}
    keywords = {node.arg for node in ast.walk(engine) if isinstance(node, ast.keyword)}

    assert "objects" in attributes
    assert keywords & OUTBOX_COLUMNS
    assert len(_app_modules()) > 100
