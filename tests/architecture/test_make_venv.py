"""`make` keeps .venv honest: made by the Python it names, or made again.

A venv made by another Python (or half made by a failed attempt) used to
keep failing until `make clean`; the README promises that `PYTHON=` is
enough. Each test makes a venv of its own, with the interpreter running
this suite.
"""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.live import ROOT

MAKE = shutil.which("make") or "make"


def _make_venv(venv: Path, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MAKE, "--no-print-directory", f"VENV={venv}", f"PYTHON={python}", f"{venv}/.python"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_a_venv_is_kept_for_its_python_and_made_again_for_another(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert _make_venv(venv).returncode == 0
    made_by = (venv / ".python").read_text()
    (venv / "kept").touch()

    assert _make_venv(venv).returncode == 0
    assert (venv / "kept").exists()

    (venv / ".python").write_text("3.12.1 /another/python\n")
    assert _make_venv(venv).returncode == 0
    assert not (venv / "kept").exists()
    assert (venv / ".python").read_text() == made_by


def test_a_venv_left_half_made_is_made_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # What a failed `python -m venv` or pip upgrade leaves: no record of
    # the interpreter.
    (venv / "bin").mkdir(parents=True)
    (venv / "stale").touch()

    assert _make_venv(venv).returncode == 0
    assert not (venv / "stale").exists()
    assert (venv / "bin" / "python").exists()


def test_a_python_that_does_not_run_stops_make_before_anything_is_made(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    result = _make_venv(venv, python=str(tmp_path / "no-such-python"))

    assert result.returncode != 0
    assert "pass PYTHON=python3.11" in result.stderr
    assert not venv.exists()
