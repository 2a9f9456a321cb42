"""The fault scenarios' fixtures, and their figures at the end of the run."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from accounts.services import create_api_client
from tests.faults.harness import REPORT, Deployment
from tests.support.faults import RabbitVhost, RedisServer
from tests.support.live import suite_database_env, suite_database_url


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("fault scenarios")
        for line in REPORT:
            terminalreporter.write_line(line)


@pytest.fixture
def broker() -> Iterator[RedisServer]:
    """A Redis of the scenario's own, to stop and start: nothing else's queue."""
    with RedisServer() as redis:
        yield redis


@pytest.fixture
def broker_kind() -> str:
    """The broker of a scenario that names none: Redis, which it may stop and start."""
    return "redis"


@pytest.fixture
def broker_url(broker_kind: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of the scenario's own broker: a Redis of its own, or a RabbitMQ virtual host."""
    if broker_kind == "redis":
        redis: RedisServer = request.getfixturevalue("broker")
        yield redis.url()
    else:
        assert broker_kind == "rabbitmq", broker_kind
        with RabbitVhost() as vhost:
            yield vhost.url()


@pytest.fixture
def token(transactional_db: None, catalog: None) -> str:
    return create_api_client(tenant_slug="faults", name="client").token


@pytest.fixture
def database_url(transactional_db: None) -> str:
    return suite_database_url()


@pytest.fixture
def deployment(transactional_db: None, broker_url: str, tmp_path: Path) -> Iterator[Deployment]:
    """Nothing started yet: each scenario starts what it needs, on the suite's database."""
    env = suite_database_env(CELERY_BROKER_URL=broker_url)
    deployment = Deployment(env=env, var_dir=tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()
