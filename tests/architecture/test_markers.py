"""Each test carries the markers of what it starts, so that `make check` starts nothing.

tests/conftest.py puts the markers on the tests when pytest collects them,
by following the objects a test and its fixtures name. These tests read
the source instead, on their own: a test of tests/live/ or tests/faults/,
or one whose code (its fixtures', its helpers') names a helper that starts
a server, must carry that helper's markers. They hold every test of the
run they are part of: the whole suite under `make test`, and under
`make check` the tests it kept, where an unmarked server would show.
"""

import ast
import importlib
import re
import tomllib
from dataclasses import dataclass
from functools import cache

import pytest

from tests.conftest import FOLDER_MARKERS, SLOW, STARTERS
from tests.support.live import ROOT

TESTS = ROOT / "tests"

# Modules of tests that start processes of their own beside those of
# tests/support's helpers, which are not servers: each one ends before its
# test does.
SHORT_LIVED_PROCESSES = {
    # Six clients at once, each asking for one key and exiting.
    "tests/client/test_key_stores.py",
    # Clients that crash, or hang until killed, on purpose.
    "tests/idempotency/test_crash_safety.py",
}


def _declared_markers() -> set[str]:
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    return {line.split(":")[0] for line in pytest_options["ini_options"]["markers"]}


def _check_markers() -> str:
    found = re.search(r"^CHECK_MARKERS := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found is not None
    return found.group(1)


@dataclass(frozen=True)
class _Module:
    name: str
    defs: dict[str, ast.AST]
    # Each name imported with `from … import`, to what it names.
    imports: dict[str, str]


@cache
def _module(name: str) -> _Module | None:
    path = ROOT.joinpath(*name.split(".")).with_suffix(".py")
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    defs: dict[str, ast.AST] = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    imports = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        for alias in node.names
    }
    return _Module(name, defs, imports)


def _conftests(module: str) -> list[str]:
    """The conftest modules whose fixtures a test of ``module`` may use, nearest first."""
    parts = module.split(".")[:-1]
    found = []
    while parts:
        name = ".".join([*parts, "conftest"])
        if _module(name) is not None:
            found.append(name)
        parts.pop()
    return found


class _Reach:
    """The markers of the starters a test's source names, through the source of tests/."""

    def __init__(self, conftests: list[str]) -> None:
        self.conftests = conftests
        self.seen: set[tuple[str, str]] = set()

    def of(self, module: str, name: str) -> set[str]:
        if f"{module}.{name}" in STARTERS:
            return set(STARTERS[f"{module}.{name}"])
        index = _module(module)
        if (module, name) in self.seen or index is None or name not in index.defs:
            return set()
        self.seen.add((module, name))
        node = index.defs[name]
        found: set[str] = set()
        for used in _globals_used(node):
            found |= self._named(index, used)
        # A function's own parameters are fixtures (those of the functions
        # and lambdas within it are not).
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for parameter in [*node.args.args, *node.args.kwonlyargs]:
                found |= self._fixture(index, parameter.arg)
        return found

    def _named(self, index: _Module, name: str) -> set[str]:
        if name in index.defs:
            return self.of(index.name, name)
        qualified = index.imports.get(name, "")
        if qualified in STARTERS:
            return set(STARTERS[qualified])
        module, _, attribute = qualified.rpartition(".")
        return self.of(module, attribute) if module.startswith("tests.") else set()

    def _fixture(self, index: _Module, name: str) -> set[str]:
        for module in (index.name, *self.conftests):
            found = _module(module)
            if found is not None and name in found.defs:
                return self.of(module, name)
        return set()


def _globals_used(node: ast.AST) -> set[str]:
    """The names ``node`` reads and does not bind itself: its globals, roughly."""
    read: set[str] = set()
    bound: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            (read if isinstance(child.ctx, ast.Load) else bound).add(child.id)
        elif isinstance(child, ast.arg):
            bound.add(child.arg)
    return read - bound


def _expected_markers(item: pytest.Function) -> set[str]:
    path = item.path.relative_to(TESTS)
    expected = set(FOLDER_MARKERS.get(path.parts[0], ()))
    module = ".".join(item.path.relative_to(ROOT).with_suffix("").parts)
    name = item.cls.__name__ if item.cls is not None else item.originalname
    return expected | _Reach(_conftests(module)).of(module, name)


def test_every_test_of_this_run_carries_the_markers_of_what_it_starts(
    request: pytest.FixtureRequest,
) -> None:
    unmarked = []
    for item in request.session.items:
        if isinstance(item, pytest.Function) and item.path.is_relative_to(TESTS):
            missing = _expected_markers(item) - {mark.name for mark in item.iter_markers()}
            if missing:
                unmarked.append(f"{item.nodeid}: {', '.join(sorted(missing))}")

    assert unmarked == []


def test_the_source_is_read_as_tests_conftest_reads_it() -> None:
    # The reading above finds a server behind a fixture of a conftest
    # (hostile's stack: gunicorn behind nginx), and behind a module's own
    # fixture and helper (the generated client's service and worker).
    stack = _Reach(_conftests("tests.hostile.test_edge_errors"))
    generated = _Reach(_conftests("tests.docs.test_generated_client"))

    assert stack.of("tests.hostile.test_edge_errors", "edge") == {"live", "proxy"}
    assert generated.of("tests.docs.test_generated_client", "generated") == {"live"}
    plain = _Reach(_conftests("tests.orders.test_orders_api"))
    assert (
        plain.of("tests.orders.test_orders_api", "test_an_order_is_priced_from_the_catalog")
        == set()
    )


def test_tests_live_and_tests_faults_are_marked_whole_and_left_out_of_make_check() -> None:
    excluded = set(re.findall(r"not (\w+)", _check_markers()))

    assert {"live", "faults"} <= FOLDER_MARKERS.keys()
    for folder, markers in FOLDER_MARKERS.items():
        assert (TESTS / folder).is_dir(), folder
        assert set(markers) & excluded, folder


def test_make_check_leaves_out_every_declared_marker() -> None:
    # Its promise is the tests that carry none: a new marker's tests must
    # not join the quick loop unnoticed.
    check = _check_markers()

    assert re.fullmatch(r"not \w+( and not \w+)*", check), check
    assert set(re.findall(r"not (\w+)", check)) == _declared_markers()


def test_every_marker_given_is_declared_and_every_starter_exists() -> None:
    given = {m for markers in [*FOLDER_MARKERS.values(), *STARTERS.values()] for m in markers}

    assert given | {"transactional", "slow"} <= _declared_markers()
    for name in STARTERS:
        module, _, attribute = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attribute), name
    for path, functions in SLOW.items():
        index = _module(path.removesuffix(".py").replace("/", "."))
        assert index is not None, path
        assert functions <= index.defs.keys(), path


def _starts_a_process(node: ast.AST) -> bool:
    """Whether ``node`` calls ``subprocess.Popen``, or ``servers.start`` (tests/support)."""
    return any(
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and (
            call.func.attr == "Popen"
            or (
                call.func.attr == "start"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "servers"
            )
        )
        for call in ast.walk(node)
    )


def test_what_starts_a_process_in_tests_support_is_a_starter() -> None:
    # A new helper that starts a server would otherwise mark nothing.
    unnamed = []
    for path in sorted((TESTS / "support").glob("*.py")):
        index = _module(f"tests.support.{path.stem}")
        assert index is not None
        for name, node in index.defs.items():
            if _starts_a_process(node) and f"{index.name}.{name}" not in STARTERS:
                unnamed.append(f"{index.name}.{name}")

    assert unnamed == []


def test_a_test_module_that_starts_a_process_is_in_a_marked_folder_or_says_why_not() -> None:
    starting = {
        path.relative_to(ROOT).as_posix()
        for path in TESTS.glob("*/test_*.py")
        if path.relative_to(TESTS).parts[0] not in FOLDER_MARKERS
        and _starts_a_process(ast.parse(path.read_text()))
    }

    assert starting == SHORT_LIVED_PROCESSES
