"""Every example of README.md and client/README.md is run by a test, and this file says which.

An example nobody runs drifts from the code without anyone noticing. Each
```sh and ```python block of the two READMEs is named here, by the heading
it is under, with what runs it: a test (`path::test_name`) or a line of
what CI runs (`path:text`, a line of the Makefile or of .ci/run). A new
block with no entry fails, and so does an entry whose block or whose test
is gone:

- README.md, "Two commands": `make run` by tests/live/test_make_run.py,
  `make test` by CI itself (.ci/run runs it).
- README.md, the quick loop's two blocks: the test commands by
  tests/docs/test_test_commands.py, which collects each as written; the
  manage.py line by tests/docs/test_readme.py, which runs it.
- README.md, the walkthrough: tests/live/test_readme_walkthrough.py runs
  it step by step and compares every answer with the one it shows.
- client/README.md, every python block: tests/live/test_client_readme.py
  runs each against a live service, with a check of what it promises.
- client/README.md, "Install": `pip install -e ./client` is what
  `make install-dev` runs, on every checkout CI tests; `pip install
  ./client` needs the package index for its build backend and its
  dependencies, which no test reaches, so the test here holds both lines
  to the package `make install-dev` installs.
- client/README.md, "Checks": the pip and mypy lines are the Makefile's
  own (install-dev, and every mypy run), the pytest line is collected by
  tests/docs/test_test_commands.py.

The Webhooks section's claim that a refusal is stored under its key, so
that after a restart with WEBHOOK_ALLOW_PRIVATE_URLS the old key replays
it, is checked here too, through the API.
"""

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import override_settings

from tests.support.http import Api, problem

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "client/README.md")
_BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^#{2,4} (.*)$", re.MULTILINE)

EVERY_PYTHON_BLOCK = (
    "tests/live/test_client_readme.py::test_each_python_block_runs_and_does_what_the_readme_says"
)
TEST_COMMANDS = (
    "tests/docs/test_test_commands.py::test_every_test_command_the_repository_shows_selects_a_test"
)
EDITABLE_INSTALL = "Makefile:$(PY) -m pip install --quiet --no-deps -e client"

RUN_BY: dict[tuple[str, str], tuple[str, ...]] = {
    ("README.md", "sh: Two commands"): (
        "tests/live/test_make_run.py::test_make_run_serves_and_stops_everything_once",
        ".ci/run:make test",
    ),
    ("README.md", "sh: The quick loop, and the other targets"): (TEST_COMMANDS,),
    ("README.md", "sh: The quick loop, and the other targets #2"): (
        "tests/docs/test_readme.py::test_the_readmes_manage_py_lines_run_as_printed",
    ),
    ("README.md", "sh: Walkthrough: create, replay, conflict, pay"): (
        "tests/live/test_readme_walkthrough.py"
        "::test_the_walkthrough_answers_as_shown_and_replays_after_a_restart",
    ),
    ("client/README.md", "sh: Install"): (
        EDITABLE_INSTALL,
        "tests/docs/test_readme_examples.py"
        "::test_the_client_install_lines_install_the_package_make_install_dev_installs",
    ),
    ("client/README.md", "sh: Checks"): (
        EDITABLE_INSTALL,
        "Makefile:$(BIN)/mypy --config-file client/pyproject.toml",
        TEST_COMMANDS,
    ),
}


@dataclass(frozen=True)
class Block:
    document: str
    name: str
    code: str


def blocks(document: str) -> list[Block]:
    """The document's sh and python blocks, named by language and the heading above them."""
    text = (ROOT / document).read_text()
    found: list[Block] = []
    for match in _BLOCK.finditer(text):
        headings = _HEADING.findall(text, 0, match.start())
        heading = headings[-1] if headings else "(top)"
        name = f"{match.group(1)}: {heading}"
        earlier = sum(1 for block in found if block.name.split(" #")[0] == name)
        found.append(Block(document, name if not earlier else f"{name} #{earlier + 1}", match[2]))
    return found


def runs_of(block: Block) -> tuple[str, ...]:
    if block.document == "client/README.md" and block.name.startswith("python: "):
        return (EVERY_PYTHON_BLOCK,)
    return RUN_BY.get((block.document, block.name), ())


def every_block() -> list[Block]:
    return [block for document in DOCUMENTS for block in blocks(document)]


def test_every_example_block_is_run_by_something_named_here() -> None:
    unrun = [f"{block.document}, {block.name}" for block in every_block() if not runs_of(block)]

    assert unrun == [], "examples no test runs: name what runs each in RUN_BY"


def test_every_entry_names_a_block_the_documents_have() -> None:
    named = {(block.document, block.name) for block in every_block()}

    assert set(RUN_BY) - named == set()


@pytest.mark.parametrize(
    "runner", sorted({run for block in every_block() for run in runs_of(block)})
)
def test_what_runs_each_example_exists(runner: str) -> None:
    if "::" in runner:
        path, name = runner.split("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.MULTILINE), runner
    else:
        path, line = runner.split(":", 1)
        assert line in (ROOT / path).read_text(), runner


def test_the_client_install_lines_install_the_package_make_install_dev_installs() -> None:
    (install,) = [block for block in blocks("client/README.md") if block.name == "sh: Install"]
    commands = [shlex.split(line, comments=True) for line in install.code.splitlines()]
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]

    # Run from the service's repository, as the block says: ./client is the
    # client's project, the one the Makefile installs (editable) into .venv.
    assert commands == [["pip", "install", "./client"], ["pip", "install", "-e", "./client"]]
    assert project["name"] == "order-service-client"
    assert EDITABLE_INSTALL.split(":", 1)[1] in (ROOT / "Makefile").read_text()


@pytest.mark.django_db
def test_a_refused_local_endpoint_is_replayed_under_its_key_after_the_setting_allows_it(
    api: Api,
) -> None:
    endpoint = {"url": "http://127.0.0.1:8001/", "eventTypes": ["*"]}
    section = (ROOT / "client" / "README.md").read_text().split("## Webhooks")[1]

    with override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=False):
        refused = api.post("/v1/webhook-endpoints", endpoint, key="hook-1")
    with override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=True):
        replayed = api.post("/v1/webhook-endpoints", endpoint, key="hook-1")
        created = api.post("/v1/webhook-endpoints", endpoint, key="hook-2")

    assert "`WEBHOOK_ALLOW_PRIVATE_URLS=true make run`" in section
    assert (refused.status_code, problem(refused)["error"]) == (400, "ValidationError")
    assert (replayed.status_code, replayed.content) == (400, refused.content)
    assert replayed["Idempotent-Replayed"] == "true"
    assert created.status_code == 201
