"""The service's packages are listed once: [tool.importlinter]'s root_packages.

The wheel, mypy (make's PACKAGES, which pre-commit's hook runs through make)
and the layers' contract all read that list, or find the same packages; a
second copy of it would go stale with the first package added.
tests/architecture/test_layers.py holds it to the repository's folders.
"""

import glob
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from tests.support.live import BIN, ROOT

MAKE = shutil.which("make") or "make"


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _root_packages() -> list[str]:
    packages: list[str] = _pyproject()["tool"]["importlinter"]["root_packages"]
    return packages


def _found(directory: Path, exclude: list[str]) -> Iterator[str]:
    """What setuptools' find finds without namespaces: folders with an
    __init__.py, within folders that have one, less those excluded."""
    for child in sorted(directory.iterdir()):
        if (child / "__init__.py").is_file() and "." not in child.name:
            package = ".".join(child.relative_to(ROOT).parts)
            if not any(fnmatchcase(package, pattern) for pattern in exclude):
                yield package
            yield from _found(child, exclude)


def test_the_wheel_holds_the_root_packages_and_their_subpackages_alone() -> None:
    # setuptools is not among the locked tools, so its search is read, not run.
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    assert find["namespaces"] is False
    packages = set(_found(ROOT, find["exclude"]))
    subpackages = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for root in _root_packages()
        for path in (ROOT / root).rglob("__init__.py")
    }

    assert {package.split(".")[0] for package in packages} == set(_root_packages())
    assert packages == subpackages


def test_every_data_file_of_the_packages_ships_as_package_data_alone() -> None:
    # Data files taken from every source file instead (setuptools'
    # include-package-data) made each install warn, in some forty lines, of
    # the template folder api/templates/drf_spectacular, which has no module.
    setuptools = _pyproject()["tool"]["setuptools"]
    patterns = setuptools["package-data"]["*"]
    unshipped = []
    for root in _root_packages():
        for path in sorted((ROOT / root).rglob("*")):
            if not path.is_file() or path.suffix in (".py", ".pyc"):
                continue
            # setuptools matches package-data from the file's own package.
            package = next(p for p in path.parents if (p / "__init__.py").is_file())
            shipped = {
                package / match
                for pattern in patterns
                for match in glob.glob(pattern, root_dir=package, recursive=True)
            }
            if path not in shipped:
                unshipped.append(str(path.relative_to(ROOT)))

    assert setuptools["include-package-data"] is False
    assert unshipped == [], f"not matched by [tool.setuptools.package-data]: {unshipped}"


def test_make_type_checks_the_root_packages() -> None:
    result = subprocess.run(
        [MAKE, "--no-print-directory", "-n", "typecheck", f"VENV={BIN.parent}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    mypy = next(line for line in result.stdout.splitlines() if "--config-file" not in line)

    assert mypy.split()[1:] == [*_root_packages(), "tests"]


def test_no_other_file_writes_the_list() -> None:
    names = set(_root_packages())
    for path in ("Makefile", ".pre-commit-config.yaml"):
        for number, line in enumerate((ROOT / path).read_text().splitlines(), start=1):
            named = names & set(re.findall(r"[a-z]+", line))
            assert len(named) <= 2, f"{path}:{number} lists packages: {line}"
    assert "include" not in _pyproject()["tool"]["setuptools"]["packages"]["find"]
