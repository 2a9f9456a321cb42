"""The fault scenarios' fixtures, and their figures at the end of the run."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from accounts.services import create_api_client
from tests.faults.harness import BROKERS, REPORT, Broker, Deployment
from tests.support.faults import RabbitBroker, RedisServer
from tests.support.live import suite_database_env, suite_database_url


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("fault scenarios")
        for line in REPORT:
            terminalreporter.write_line(line)


@pytest.fixture
def broker_kind() -> str:
    """The broker of a scenario that names none (``BROKERS`` in tests/faults/harness.py)."""
    return "redis"


@pytest.fixture
def broker(broker_kind: str) -> Iterator[Broker]:
    """A broker of the scenario's own, to stop and start: nothing else's queue.

    A Redis of its own, or a virtual host of its own on the machine's
    RabbitMQ behind a proxy that stops it for the scenario.
    """
    assert broker_kind in BROKERS, broker_kind
    with RedisServer() if broker_kind == "redis" else RabbitBroker() as server:
        yield server


@pytest.fixture
def token(transactional_db: None, catalog: None) -> str:
    return create_api_client(tenant_slug="faults", name="client").token


@pytest.fixture
def database_url(transactional_db: None) -> str:
    return suite_database_url()


@pytest.fixture
def deployment(transactional_db: None, broker: Broker, tmp_path: Path) -> Iterator[Deployment]:
    """Nothing started yet: each scenario starts what it needs, on the suite's database."""
    env = suite_database_env(CELERY_BROKER_URL=broker.url())
    deployment = Deployment(env=env, var_dir=tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()
