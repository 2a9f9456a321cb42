"""Every test command the repository shows runs a test, and docs/TESTS.md maps every package.

`make check` leaves out the tests that carry a marker (the Makefile's
CHECK_MARKERS, put on the tests by tests/conftest.py), so `make check
PYTEST_ARGS=FILE` on a file whose every test carries one selects nothing:
pytest says "deselected" and exits 5, and the reader who pasted it learns
nothing. Each `make check PYTEST_ARGS=…`, `make test PYTEST_ARGS=…` and
`.venv/bin/pytest …` the documents and the Makefile's comments show is
collected here as that command collects it, by pytest in a process of its
own. The commands share one collection, with make check's `-m`, which
records the markers of what it keeps and of what it deselects: a
collection of the suite costs seconds, and one for each of the thirty-odd
commands would cost a minute of the quick loop. A command with other
options (`-k`, a marker expression with arguments) is collected alone.
"""

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "TESTS.md"
DOCUMENTS = sorted(
    {
        ROOT / "README.md",
        ROOT / "client" / "README.md",
        ROOT / "conformance" / "README.md",
        *(ROOT / "docs").rglob("*.md"),
    }
)
MAKE_EXAMPLE = re.compile(r"make (check|test) PYTEST_ARGS=(\"[^\"]*\"|'[^']*'|[^\s`|)]+)")
# Up to the end of the line, or of the inline code span it stands in.
PYTEST_EXAMPLE = re.compile(r"\.venv/bin/pytest((?:\s+[^\s`]+)*)")
TEST_PATH = re.compile(r"`(tests/[^`\s]*)`")
# pytest's options whose value is the next argument, rather than a path.
VALUED_OPTIONS = {"-m", "-k", "-p", "-o", "-c", "--deselect", "--ignore", "--basetemp"}

# Records, by node id, the markers of the tests a collection kept and of
# those its -m deselected.
_COLLECT = """
import json, sys, pytest

def markers(items):
    return {item.nodeid: sorted({m.name for m in item.iter_markers()}) for item in items}

class Record:
    def __init__(self):
        self.found = {"selected": {}, "deselected": {}}

    def pytest_deselected(self, items):
        self.found["deselected"].update(markers(items))

    def pytest_collection_finish(self, session):
        self.found["selected"] = markers(session.items)

record = Record()
code = pytest.main(sys.argv[2:], plugins=[record])
with open(sys.argv[1], "w") as out:
    json.dump({"code": int(code), **record.found}, out)
"""


@dataclass(frozen=True)
class Example:
    where: str
    command: str
    # "check" for make check, which adds its -m; "test" for make test and pytest.
    runner: str
    args: tuple[str, ...]

    @property
    def paths(self) -> list[str]:
        return [arg for at, arg in enumerate(self.args) if not self._option_or_value(at)]

    @property
    def marks(self) -> str | None:
        """Its own -m expression, which replaces make check's (pytest keeps the last)."""
        given = [self.args[at + 1] for at, arg in enumerate(self.args[:-1]) if arg == "-m"]
        return given[-1] if given else None

    @property
    def shareable(self) -> bool:
        """Whether the shared collection can tell what it selects: paths, and a plain -m."""
        options = [arg for at, arg in enumerate(self.args) if self._option_or_value(at)]
        if any(option.startswith("-") and option != "-m" for option in options):
            return False
        return self.marks is None or _plain(self.marks)

    def _option_or_value(self, at: int) -> bool:
        return self.args[at].startswith("-") or (at > 0 and self.args[at - 1] in VALUED_OPTIONS)


def _plain(expression: str) -> bool:
    try:
        _matches(expression, set())
    except (SyntaxError, ValueError):
        return False
    return True


def _matches(expression: str, markers: set[str]) -> bool:
    """pytest's -m for what it shares with Python: names, and, or, not, parentheses."""

    def holds(node: ast.expr) -> bool:
        match node:
            case ast.BoolOp(op=ast.And(), values=values):
                return all(holds(value) for value in values)
            case ast.BoolOp(op=ast.Or(), values=values):
                return any(holds(value) for value in values)
            case ast.UnaryOp(op=ast.Not(), operand=operand):
                return not holds(operand)
            case ast.Name(id=name):
                return name in markers
        raise ValueError(f"not a plain marker expression: {expression}")

    return holds(ast.parse(expression, mode="eval").body)


def _check_markers() -> str:
    found = re.search(r"^CHECK_MARKERS := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found is not None, "the Makefile sets no CHECK_MARKERS"
    return found.group(1)


def _lines(path: Path) -> list[tuple[int, str]]:
    """A file's lines by number, with shell continuations joined; the Makefile's comments."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if path.name == "Makefile" and not line.startswith("#"):
            continue
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.strip()
        if line.endswith("\\"):
            pending = (number, line[:-1])
            continue
        pending = None
        joined.append((number, line))
    return joined


def examples_in(path: Path) -> list[Example]:
    found = []
    for number, line in _lines(path):
        where = f"{path.relative_to(ROOT)}:{number}"
        for match in MAKE_EXAMPLE.finditer(line):
            runner, value = match.groups()
            # make takes the quotes off; the recipe's shell splits the rest.
            args = tuple(shlex.split(value.rstrip(".,;:").strip("\"'")))
            found.append(Example(where, match.group(0), runner, args))
        for match in PYTEST_EXAMPLE.finditer(line):
            args = tuple(shlex.split(match.group(1)))
            found.append(Example(where, match.group(0), "test", args))
    return found


def _missing(arg: str) -> str | None:
    """Why a path argument names nothing, or None when it names something."""
    path, _, name = arg.partition("::")
    if not (ROOT / path).exists():
        return f"{path} does not exist"
    function = name.split("::")[-1].split("[")[0]
    if function and not re.search(
        rf"^\s*(?:async def|def|class) {re.escape(function)}\b", (ROOT / path).read_text(), re.M
    ):
        return f"{path} has no {function}"
    return None


def _under(arg: str, node: str) -> bool:
    arg = arg.rstrip("/")
    return node == arg or node.startswith((f"{arg}/", f"{arg}::", f"{arg}["))


def _collect(args: list[str], out: Path) -> dict[str, Any]:
    """What pytest run with ``args`` collects, and what it deselects, by node id."""
    ran = subprocess.run(
        [sys.executable, "-c", _COLLECT, str(out), "-p", "no:cacheprovider", "--collect-only",
         "-q", *args],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    printed = ran.stdout + ran.stderr
    if not out.exists():
        pytest.fail(f"the collection stopped before its end:\n{printed[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["printed"] = printed
    return result


def _unselected(example: Example, collected: dict[str, Any]) -> str | None:
    """Why ``example`` selects no test, judged from the shared collection; None if it does."""
    if example.marks is not None:
        pool = [
            node
            for node, markers in (collected["selected"] | collected["deselected"]).items()
            if _matches(example.marks, set(markers))
        ]
    elif example.runner == "check":
        pool = list(collected["selected"])
    else:
        pool = [*collected["selected"], *collected["deselected"]]
    empty = [arg for arg in example.paths if not any(_under(arg, node) for node in pool)]
    if not example.paths and not pool:
        empty = ["the suite"]
    if not empty:
        return None
    told = f"{example.where}: {example.command} selects no test of {', '.join(empty)}"
    if example.runner == "check" and example.marks is None:
        told += (
            ": each carries a marker make check leaves out; show `make test PYTEST_ARGS=…`"
            " (docs/TESTS.md), or a path with tests make check runs"
        )
    return told


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return [example for path in [*DOCUMENTS, ROOT / "Makefile"] for example in examples_in(path)]


@pytest.fixture(scope="module")
def unrunnable(examples: list[Example], tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Each example that would select no test, with where it is and why."""
    failures = [
        f"{example.where}: {example.command}: {why}"
        for example in examples
        for arg in example.paths
        if (why := _missing(arg))
    ]
    valid = [example for example in examples if not any(map(_missing, example.paths))]
    shared = [example for example in valid if example.shareable]
    alone = [example for example in valid if not example.shareable]
    paths = sorted({arg for example in shared for arg in example.paths})
    if not all(example.paths for example in shared):
        # A command that names no path collects the whole suite.
        paths = []
    workspace = tmp_path_factory.mktemp("collections")
    check = ["-m", _check_markers()]

    collected = _collect([*check, *paths], workspace / "shared.json")
    if collected["code"] not in (0, 5):
        pytest.fail(f"collecting {' '.join(paths)} failed:\n{collected['printed'][-3000:]}")
    failures += [why for example in shared if (why := _unselected(example, collected))]
    for number, example in enumerate(alone):
        own = [*check] if example.runner == "check" else []
        result = _collect([*own, *example.args], workspace / f"{number}.json")
        if result["code"] != 0:
            failures.append(
                f"{example.where}: {example.command} selects no test"
                f" (pytest exits {result['code']}):\n{result['printed'][-1500:]}"
            )
    return failures


def test_every_test_command_the_repository_shows_selects_a_test(unrunnable: list[str]) -> None:
    assert unrunnable == [], "\n".join(unrunnable)


def test_the_commands_are_found_where_they_are_shown(examples: list[Example]) -> None:
    # A change of how the documents write them must not leave nothing to check.
    where = {example.where.split(":")[0] for example in examples}

    assert {"README.md", "Makefile", "docs/TESTS.md"} <= where


# --- docs/TESTS.md -------------------------------------------------------------


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _sections() -> dict[str, str]:
    parts = re.split(r"^## (.+)$", MAP.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_map_has_a_section_with_a_command_for_every_package() -> None:
    packages = [*_pyproject()["tool"]["importlinter"]["root_packages"], "client", "conformance"]
    sections = _sections()

    assert [p for p in packages if p not in sections] == [], "docs/TESTS.md lacks these packages"
    for package in packages:
        commands = [e for e in examples_in(MAP) if e.command in sections[package]]
        assert commands, f"docs/TESTS.md's {package} section shows no command that runs its tests"


def test_every_test_the_map_names_exists() -> None:
    named = TEST_PATH.findall(MAP.read_text())

    assert named, "docs/TESTS.md names no test"
    assert [f"{arg}: {why}" for arg in named if (why := _missing(arg))] == []


def test_the_map_says_what_each_marker_needs() -> None:
    declared = [
        line.split(":")[0] for line in _pyproject()["tool"]["pytest"]["ini_options"]["markers"]
    ]
    rows = re.findall(r"^\| `(\w+)` \|", _sections()["Which tests need what"], re.MULTILINE)

    assert sorted(rows) == sorted(declared)
