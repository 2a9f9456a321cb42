"""The Docker Compose file is valid Compose and wires the stack as documented.

No Docker engine is needed: the file is checked against the Compose
specification's JSON schema and read as YAML. No database either.
"""

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.live import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
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
    assert {"postgres", "redis", "web", "worker", "beat", "nginx"} <= services.keys()


@pytest.mark.parametrize("name", ["postgres", "redis", "web", "worker", "nginx"])
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


def test_only_nginx_publishes_a_port(services: dict[str, Any]) -> None:
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"nginx"}
    [mapping] = services["nginx"]["ports"]
    host_port, container_port = str(mapping).split(":")
    assert host_port == "8000"
    assert container_port == services["nginx"]["environment"]["NGINX_LISTEN"]


def test_nginx_proxies_to_web_once_it_is_healthy(services: dict[str, Any]) -> None:
    nginx = services["nginx"]
    assert nginx["environment"]["NGINX_UPSTREAM"] == "web:8000"
    assert nginx["depends_on"]["web"]["condition"] == "service_healthy"
    # web's healthcheck and gunicorn's default bind both use port 8000.
    assert "127.0.0.1:8000" in " ".join(services["web"]["healthcheck"]["test"])


def test_nginx_renders_the_repository_template(services: dict[str, Any]) -> None:
    [volume] = services["nginx"]["volumes"]
    source, target, mode = volume.split(":")
    assert (ROOT / source).is_file()
    assert source.startswith("./deploy/nginx/")
    assert target.startswith("/etc/nginx/templates/")
    assert target.endswith(".template")
    assert mode == "ro"


def test_the_template_names_only_variables_nginx_is_given(services: dict[str, Any]) -> None:
    # The image's envsubst replaces every defined environment variable: any
    # other upper-case $NAME in the template could be replaced by accident.
    [volume] = services["nginx"]["volumes"]
    template = (ROOT / volume.split(":")[0]).read_text()
    named = set(re.findall(r"\$\{?([A-Z_][A-Za-z0-9_]*)", template))
    assert named == set(services["nginx"]["environment"])


def test_web_trusts_the_proxy_and_keeps_the_admin_off(services: dict[str, Any]) -> None:
    environment = services["web"]["environment"]
    assert environment["BEHIND_PROXY"] == "true"
    assert environment["ADMIN_ENABLED"] == "${ADMIN_ENABLED:-false}"
