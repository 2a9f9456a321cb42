"""The client installs and imports on its own: httpx is its one dependency, Django none of them.

It is meant to be installed into applications that are not this service,
so it must not pull in the service's framework, even by accident.
"""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"

NO_DJANGO = (
    "import order_service_client, sys; "
    "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), "
    "sorted(m for m in sys.modules if m.split('.')[0] == 'django')"
)


def test_importing_the_client_imports_no_django(tmp_path: Path) -> None:
    # Run from elsewhere, with the client's directory alone added: neither
    # the service's packages nor its settings are within reach.
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    result = subprocess.run(
        [sys.executable, "-c", NO_DJANGO],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(CLIENT_DIR)},
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr


def test_no_module_of_the_client_names_django() -> None:
    # Catches an import inside a function, which importing the package would not run.
    sources = {path.name: path.read_text() for path in CLIENT_DIR.rglob("*.py")}

    assert sources
    assert [name for name, text in sources.items() if "django" in text.lower()] == []


def test_httpx_is_the_only_dependency() -> None:
    project = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]

    assert project["name"] == "order-service-client"
    assert project["dependencies"] == ["httpx>=0.27,<0.29"]
    assert project["requires-python"] == ">=3.11,<3.14"
