"""The GitHub workflow is valid and runs what the project's own CI runs, on every Python.

actionlint checks it offline (syntax, expressions, the matrix, action
inputs), so a broken workflow is caught here rather than on a first push.
"""

import re
import subprocess
import tomllib
from typing import Any

import yaml

from tests.support.live import BIN, ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def _supported_pythons() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: "
    return [c.removeprefix(prefix) for c in project["classifiers"] if c.startswith(prefix)]


def test_actionlint_finds_nothing() -> None:
    result = subprocess.run(
        [str(BIN / "actionlint"), "-no-color", str(WORKFLOW)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_workflow_runs_ci_run_on_every_supported_python() -> None:
    workflow: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    steps = [step.get("run", "") for step in job["steps"]]

    assert job["strategy"]["matrix"]["python"] == _supported_pythons()
    assert "bash .ci/run" in steps
    # Each job its own Python's part, as .ci/run gives it: the lists are
    # written there alone.
    assert job["env"]["CI_PYTHON"] == "${{ matrix.python }}"
    assert not {"CI_PYTHONS", "CI_CHECK_PYTHONS"} & job["env"].keys()


def _ci_run_default(variable: str) -> list[str]:
    found = re.search(rf"\$\{{{variable}-([\d. ]+)\}}", (ROOT / ".ci" / "run").read_text())
    assert found is not None, variable
    return found.group(1).split()


def test_ci_run_runs_the_whole_suite_on_the_newest_python_and_make_check_on_the_others() -> None:
    pythons = _supported_pythons()

    assert _ci_run_default("CI_PYTHONS") == [pythons[-1]]
    assert _ci_run_default("CI_CHECK_PYTHONS") == pythons[:-1]


def test_ci_run_checks_make_run_on_every_python() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    interpreter_tests = re.search(r'^INTERPRETER_TESTS="([^"]+)"$', script, re.MULTILINE)

    assert interpreter_tests is not None
    assert "tests/live/test_make_run.py" in interpreter_tests.group(1).split()
    for path in interpreter_tests.group(1).split():
        assert (ROOT / path).is_file(), path
    assert 'make check PYTHON="$python"' in script
    assert 'PYTEST_ARGS="$INTERPRETER_TESTS"' in script


def test_requires_python_admits_exactly_the_supported_pythons() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    oldest, newest = _supported_pythons()[0], _supported_pythons()[-1]
    major, minor = newest.split(".")

    assert project["requires-python"] == f">={oldest},<{major}.{int(minor) + 1}"


def test_one_lock_serves_every_python_and_names_no_index() -> None:
    # Resolved for all of them at once, with markers where one Python needs
    # something else; .ci/run installs it on each. A package index's address
    # in a lock would tie every install to that host.
    for lock in ("requirements.lock", "requirements-dev.lock"):
        header = (ROOT / lock).read_text().splitlines()[:3]
        assert any("--universal" in line for line in header), lock
        assert "://" not in (ROOT / lock).read_text(), f"{lock} names an index"
