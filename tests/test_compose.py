"""The Docker Compose file is valid Compose and wires the stack as documented.

No Docker engine is needed: the file is checked against the Compose
specification's JSON schema and read as YAML. No database either.
"""

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

COMPOSE_FILE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def command_text(service: dict[str, Any]) -> str:
    command = service["command"]
    return command if isinstance(command, str) else " ".join(command)


def test_compose_file_matches_compose_spec() -> None:
    result = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_stack_has_every_service(services: dict[str, Any]) -> None:
    assert {"postgres", "redis", "web", "worker", "beat"} <= services.keys()


@pytest.mark.parametrize("name", ["postgres", "redis", "web", "worker"])
def test_long_running_services_have_healthchecks(services: dict[str, Any], name: str) -> None:
    assert services[name]["healthcheck"]["test"]


def test_beat_has_no_healthcheck(services: dict[str, Any]) -> None:
    assert "healthcheck" not in services["beat"]


def test_web_migrates_before_gunicorn_starts(services: dict[str, Any]) -> None:
    command = command_text(services["web"])
    assert "migrate --noinput" in command
    assert "gunicorn" in command
    assert command.index("migrate") < command.index("gunicorn")


def test_web_waits_for_healthy_postgres_and_redis(services: dict[str, Any]) -> None:
    depends_on = services["web"]["depends_on"]
    for name in ("postgres", "redis"):
        assert depends_on[name]["condition"] == "service_healthy"


def test_app_services_share_settings(services: dict[str, Any]) -> None:
    environments = [services[name]["environment"] for name in ("web", "worker", "beat")]
    for key in ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY"):
        assert len({environment[key] for environment in environments}) == 1, key
