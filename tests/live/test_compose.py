"""The Docker Compose file is valid Compose and wires the stack as documented.

No Docker engine is needed: the file is checked against the Compose
specification's JSON schema and read as YAML, and the balancer's
configuration by Debian's haproxy (``haproxy -c``). No database either.
tests/live/test_multinode.py runs that configuration in front of several
nodes.
"""

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings

from tests.support.live import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
HAPROXY = Path("/usr/sbin/haproxy")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return services


def command_text(service: dict[str, Any]) -> str:
    """The command the file gives the service ("" for the image's own)."""
    command = service.get("command", "")
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
    assert {
        "postgres",
        "redis",
        "migrate",
        "web",
        "worker",
        "deliveries",
        "beat",
        "balancer",
        "nginx",
    } <= services.keys()


@pytest.mark.parametrize(
    "name", ["postgres", "redis", "web", "worker", "deliveries", "balancer", "nginx"]
)
def test_long_running_services_have_healthchecks(services: dict[str, Any], name: str) -> None:
    assert services[name]["healthcheck"]["test"]


def test_beat_has_no_healthcheck(services: dict[str, Any]) -> None:
    assert "healthcheck" not in services["beat"]


def test_one_off_migrate_runs_once_before_web_and_worker(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert command_text(migrate) == "python manage.py migrate --noinput"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    # A one-off: restarted after it exits, it would run again and again.
    assert migrate["restart"] == "no"
    assert "healthcheck" not in migrate
    for name in ("web", "worker", "deliveries"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }


def test_only_the_one_off_migrates(services: dict[str, Any]) -> None:
    # Replicas that migrated as they start would race each other.
    migrating = {name for name, service in services.items() if "migrate" in command_text(service)}
    assert migrating == {"migrate"}
    assert command_text(services["web"]).startswith("gunicorn -c config/gunicorn.py")


@pytest.mark.parametrize("name", ["web", "worker", "deliveries"])
def test_web_and_worker_can_scale(services: dict[str, Any], name: str) -> None:
    # --scale web=3 refuses a fixed container name, and a fixed host port
    # could be bound by one replica only.
    assert "container_name" not in services[name]
    assert "ports" not in services[name]


def test_web_waits_for_healthy_postgres_and_redis(services: dict[str, Any]) -> None:
    depends_on = services["web"]["depends_on"]
    for name in ("postgres", "redis"):
        assert depends_on[name]["condition"] == "service_healthy"


def test_app_services_share_settings(services: dict[str, Any]) -> None:
    environments = [
        services[name]["environment"] for name in ("migrate", "web", "worker", "deliveries", "beat")
    ]
    for key in ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY"):
        assert len({environment[key] for environment in environments}) == 1, key


def test_each_queue_has_workers_of_its_own(services: dict[str, Any]) -> None:
    # Payments and deliveries never share a slot (docs/DEPLOYING.md, "Workers").
    consumed: dict[str, list[str]] = {}
    for name, service in services.items():
        command = service.get("command") or []
        if command[:4] == ["celery", "-A", "config", "worker"]:
            queues = command[command.index("-Q") + 1]
            consumed.setdefault(queues, []).append(name)
    assert consumed == {
        queue.name: [name]
        for queue, name in zip(settings.CELERY_TASK_QUEUES, ["worker", "deliveries"], strict=True)
    }


def test_the_deliveries_worker_has_more_slots_than_one_tenant_may_fill(
    services: dict[str, Any],
) -> None:
    # Or one tenant's slow receivers could hold them all (docs/DEPLOYING.md, "Workers").
    command = services["deliveries"]["command"]
    options = dict(arg.removeprefix("--").split("=", 1) for arg in command if "=" in arg)

    assert options["pool"] == "threads"
    assert int(options["concurrency"]) > settings.WEBHOOK_TENANT_CONCURRENCY


def test_only_nginx_publishes_a_port(services: dict[str, Any]) -> None:
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"nginx"}
    [mapping] = services["nginx"]["ports"]
    host_port, container_port = str(mapping).split(":")
    assert host_port == "8000"
    assert container_port == services["nginx"]["environment"]["NGINX_LISTEN"]


def test_nginx_proxies_to_the_balancer_once_it_is_healthy(services: dict[str, Any]) -> None:
    nginx = services["nginx"]
    balancer_port = services["balancer"]["environment"]["BALANCER_BIND"].rsplit(":", 1)[1]
    assert nginx["environment"]["NGINX_UPSTREAM"] == f"balancer:{balancer_port}"
    assert nginx["depends_on"]["balancer"] == {"condition": "service_healthy", "restart": True}


def test_the_balancer_spreads_over_every_web_replica(services: dict[str, Any]) -> None:
    environment = services["balancer"]["environment"]
    # Docker's embedded DNS answers the service name with every replica.
    assert environment["WEB_ADDRESS"] == "web:8000"
    assert environment["DNS_NAMESERVER"] == "127.0.0.11:53"
    assert int(environment["WEB_SLOTS"]) >= 3
    # web's healthcheck and gunicorn's default bind both use port 8000.
    assert "127.0.0.1:8000" in " ".join(services["web"]["healthcheck"]["test"])
    assert services["balancer"]["depends_on"]["web"]["condition"] == "service_healthy"


def test_the_balancer_runs_the_repository_config(services: dict[str, Any]) -> None:
    balancer = services["balancer"]
    assert balancer["image"].startswith("haproxy:")
    [volume] = balancer["volumes"]
    source, target, mode = volume.split(":")
    assert source == "./deploy/haproxy/haproxy.cfg"
    assert (ROOT / source).is_file()
    # Where the image's command reads its configuration.
    assert target == "/usr/local/etc/haproxy/haproxy.cfg"
    assert mode == "ro"


def test_the_balancer_config_names_only_variables_compose_sets(services: dict[str, Any]) -> None:
    # HAProxy falls back on a variable's default when it is unset: a name
    # misspelt on either side would be silently ignored.
    config = (ROOT / "deploy" / "haproxy" / "haproxy.cfg").read_text()
    named = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", config))
    assert named == set(services["balancer"]["environment"])


def test_haproxy_accepts_the_balancer_config_as_compose_runs_it(
    services: dict[str, Any],
) -> None:
    environment = {k: str(v) for k, v in services["balancer"]["environment"].items()}

    result = subprocess.run(
        [str(HAPROXY), "-c", "-f", str(ROOT / "deploy" / "haproxy" / "haproxy.cfg")],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Configuration file is valid" in result.stdout
    # No warning either (an unset timeout, a misplaced rule, ...).
    assert "WARNING" not in result.stdout + result.stderr, result.stdout + result.stderr


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
