"""`make` keeps .venv honest: made by the Python it names, and never removed under a service.

A venv made by another Python (or half made by a failed attempt) used to
keep failing until `make clean`; the README promises that `PYTHON=` is
enough. Then every target removed and remade a venv of another Python,
even while `make run PYTHON=python3.12` served from it, which broke that
service. Now a venv that works is kept, and make says how to go on; only
one that nothing can run from is made again. Each test has a venv of its
own; the real ones are made with the interpreter running this suite.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.live import ROOT

MAKE = shutil.which("make") or "make"
ANOTHER_PYTHON = "3.12.1 /another/python"


def _make_venv(venv: Path, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MAKE, "--no-print-directory", f"VENV={venv}", f"PYTHON={python}", f"{venv}/.python"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def _fake_python(venv: Path, script: str) -> None:
    """``venv/bin/python`` as a shell script: a venv's shape without making one."""
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)


def _assert_kept_and_refused(result: subprocess.CompletedProcess[str], venv: Path) -> None:
    assert result.returncode != 0
    assert (venv / "in-use").exists()
    # What made it, and each way on: use it, make another, or remove it.
    assert "3.12.1" in result.stderr
    assert f"PYTHON={venv}/bin/python" in result.stderr
    assert "VENV=.venv-3." in result.stderr
    assert "make clean" in result.stderr


def test_a_venv_is_kept_for_its_python_and_adopted_when_unrecorded(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert _make_venv(venv).returncode == 0
    made_by = (venv / ".python").read_text()
    (venv / "kept").touch()

    assert _make_venv(venv).returncode == 0
    assert (venv / "kept").exists()

    # Made by hand, or by a Makefile that kept no record: its own Python
    # says what made it.
    (venv / ".python").unlink()
    assert _make_venv(venv).returncode == 0
    assert (venv / "kept").exists()
    assert (venv / ".python").read_text() == made_by


def test_a_venv_of_another_python_is_kept_and_make_stops_saying_how_to_go_on(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".python").write_text(f"{ANOTHER_PYTHON}\n")
    # Standing for `make run PYTHON=python3.12`, serving from it.
    (venv / "in-use").touch()

    _assert_kept_and_refused(_make_venv(venv), venv)
    assert (venv / ".python").read_text() == f"{ANOTHER_PYTHON}\n"


def test_a_working_venv_of_another_python_without_a_record_is_kept(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # A Python with pip, which reports another version than PYTHON's.
    _fake_python(venv, f'[ "$*" = "-m pip --version" ] && exit 0; echo "{ANOTHER_PYTHON}"')
    (venv / "in-use").touch()

    _assert_kept_and_refused(_make_venv(venv), venv)
    assert not (venv / ".python").exists()


@pytest.mark.parametrize(
    "left",
    [
        # A failed `python -m venv` before it made the interpreter.
        "no-python",
        # One that failed in ensurepip: a Python, no pip.
        "no-pip",
    ],
)
def test_a_venv_left_half_made_is_made_again(tmp_path: Path, left: str) -> None:
    venv = tmp_path / "venv"
    if left == "no-python":
        (venv / "bin").mkdir(parents=True)
    else:
        _fake_python(venv, "exit 1")
    (venv / "stale").touch()

    result = _make_venv(venv)

    assert result.returncode == 0, result.stderr
    assert not (venv / "stale").exists()
    assert (venv / ".python").exists()
    assert subprocess.run([venv / "bin" / "python", "-m", "pip", "--version"]).returncode == 0


def test_a_python_that_does_not_run_stops_make_before_anything_is_made(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    result = _make_venv(venv, python=str(tmp_path / "no-such-python"))

    assert result.returncode != 0
    assert "pass PYTHON=python3.11" in result.stderr
    assert not venv.exists()
