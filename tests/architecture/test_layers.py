"""The layers' import direction, and the checks that keep it before each commit.

The layers are declared once, in pyproject.toml (``[tool.importlinter]``),
top to bottom: config, orders, provider | operations, idempotency,
accounts, api, observability. import-linter reads every import of every
module, those inside functions included, and these tests fail on the first
one that points upward or from config into an app.
"""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import yaml

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# The project's packages, as [tool.importlinter] declares them.
PACKAGES: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "root_packages"
]


def test_no_module_imports_a_layer_above_its_own() -> None:
    result = subprocess.run(
        [str(LINT_IMPORTS), "--config", "pyproject.toml", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_module_imports_one_that_imports_it_back() -> None:
    # Within a layer too: a circle is two modules that cannot be read, or
    # changed, one without the other. An import inside a function (to dodge
    # the import-time error a circle raises) counts as any other.
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    circles = {
        tuple(sorted((module, imported)))
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.find_shortest_chain(importer=imported, imported=module) is not None
    }

    assert circles == set()


def test_every_package_of_the_project_has_a_layer() -> None:
    # A new top-level package outside the contract would be checked by nothing,
    # and left out of the wheel, mypy and pre-commit, which read the same list
    # (tests/architecture/test_package_list.py). The client is a project of
    # its own.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    packages = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in {"tests", "client"}
    }

    assert packages == set(config["root_packages"])


def test_the_pre_commit_hooks_are_valid_and_run_the_locked_tools() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("pre-commit")), "validate-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]

    assert result.returncode == 0, result.stdout + result.stderr
    assert {hook["id"] for hook in hooks} >= {"ruff-check", "ruff-format", "mypy", "import-layers"}
    makefile = (ROOT / "Makefile").read_text()
    for hook in hooks:
        command = hook["entry"].split()
        if command[0] == "make":
            # A target that runs .venv's tools and, having no prerequisite,
            # installs nothing and checks no venv.
            assert re.search(rf"^{command[-1]}:\s*$", makefile, re.MULTILINE), hook["entry"]
            continue
        # The tool of the venv `make` makes (.venv/, or the one this suite
        # runs in under another name, as .ci/run's .venv-3.13/).
        tool = Path(command[0])
        assert tool.parent == Path(".venv/bin"), hook["entry"]
        assert (Path(sys.executable).parent / tool.name).exists(), hook["entry"]
