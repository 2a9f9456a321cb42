"""The client installs and imports on its own: httpx and standardwebhooks are its dependencies.

It is meant to be installed into applications that are not this service,
so it must not pull in the service's framework, even by accident: Django
is none of its dependencies, and no module of it imports Django.
"""

import ast
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


def test_httpx_and_standardwebhooks_are_the_only_dependencies() -> None:
    project = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]

    assert project["name"] == "order-service-client"
    assert project["dependencies"] == ["httpx>=0.27,<0.29", "standardwebhooks>=1.1,<1.2"]
    assert project["requires-python"] == ">=3.11,<3.14"


def test_the_client_imports_nothing_but_its_dependencies_and_the_standard_library() -> None:
    # What pyproject.toml declares is what the code may import: one more
    # package imported would break an application that installed the client.
    imported: set[str] = set()
    for path in CLIENT_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])

    third_party = imported - set(sys.stdlib_module_names) - {"order_service_client"}

    assert third_party == {"httpx", "standardwebhooks"}
