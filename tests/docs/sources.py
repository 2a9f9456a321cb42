"""What the documents' checks read from the repository itself.

The service's packages come from ``[tool.importlinter]`` (as
tests/architecture/test_layers.py reads them), so a new package is
scanned without a second list to keep. A setting's default is read by a
process of its own, whose environment holds no IDEMPOTENCY_* or other
setting: a developer's exported variables cannot make a check pass or fail.
"""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

SERVICE_PACKAGES: tuple[str, ...] = tuple(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
)


def settings_probe(
    script: str, tmp_path_factory: pytest.TempPathFactory, **environment: str
) -> Any:
    """What ``script`` prints as JSON, run with the settings module and nothing else set.

    It gets a var/ of its own (the local secret key), so the checkout's is
    untouched, and ``environment`` on top.
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "VAR_DIR": str(tmp_path_factory.mktemp("var")),
        **environment,
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)
