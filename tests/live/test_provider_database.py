"""The provider simulator's ledger in a database of its own (``PROVIDER_DATABASE_URL``).

A real provider's records are not in our database, and survive whatever
happens to it; the fault scenarios of a failover count the charges there
(tests/faults/test_failover.py). Here the service runs with its database and
the provider's apart: ``migrate`` creates each one's tables in its own
database and nowhere else, a payment's charge is written to the provider's,
and ``provider_ledger`` reads it from there.
"""

import json
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.faults import PostgresCluster, RedisServer
from tests.support.live import base_env, manage, paid_order, serve


@pytest.fixture
def server() -> Iterator[PostgresCluster]:
    with PostgresCluster() as server:
        server.create_database("orders")
        server.create_database("provider")
        yield server


def tables(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as db:
        rows = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {row[0] for row in rows}


def test_the_ledger_is_kept_in_the_providers_own_database(server: PostgresCluster) -> None:
    with RedisServer() as broker:
        env = base_env(
            DATABASE_URL=server.url("orders"),
            PROVIDER_DATABASE_URL=server.url("provider"),
            CELERY_BROKER_URL=broker.url(),
        )
        manage("migrate", "--verbosity=0", env=env)
        manage("migrate", "--verbosity=0", env=env)  # safe to run twice
        manage("seed_demo", env=env)
        token = manage("create_api_client", "acme", "alice", env=env).splitlines()[-1]
        with serve(env, celery=True) as service:
            payment_id = paid_order(service, token, key="first")
        ledger = [json.loads(line) for line in manage("provider_ledger", env=env).splitlines()]

    service_tables, provider_tables = tables(server.url("orders")), tables(server.url("provider"))
    simulators = {"provider_attempt", "provider_ledgerentry", "provider_outage"}
    assert provider_tables == {"django_migrations", *simulators}
    assert {"orders_order", "orders_payment", "operations_operation"} <= service_tables
    assert not simulators & service_tables
    assert [(e["kind"], e["paymentId"]) for e in ledger] == [("charge", payment_id)]
