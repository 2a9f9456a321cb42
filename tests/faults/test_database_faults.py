"""PostgreSQL failing under the service: backends terminated, the server restarted.

Nothing half-done survives a database failure: a command's key, effects
and answer commit together or not at all, so a retry under the same key
executes once. While the database is away, every request is answered at
once with ``503 ServiceUnavailable`` and ``Retry-After`` (never a hang,
never an HTML page), and ``/readyz`` says so; once it is back, the same
processes serve again: each request's first query checks its connection
and replaces one the restart closed.
"""

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from django.conf import settings
from django.db import connection

from tests.faults.harness import Deployment, Figures, RetryingClient, audit, seconds_until_finished
from tests.support.faults import PostgresCluster, RedisServer
from tests.support.live import base_env, manage

# After a database failure, operations wait at most for a lapsed lease
# (OPERATION_LEASE, 10 s) and the next sweep (2 s).
DATABASE_BACK_GOAL_S = 15.0


@pytest.mark.django_db(transaction=True)
def test_backends_terminated_under_load(
    deployment: Deployment, token: str, database_url: str
) -> None:
    figures = Figures("PostgreSQL backends terminated", goal_s=DATABASE_BACK_GOAL_S)
    deployment.start_web()
    deployment.start_worker()
    client = RetryingClient(deployment.service.base_url, token, figures)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own_backend,) = cursor.fetchone()
    loaded = threading.Event()
    killing = threading.Event()

    def terminate_backends() -> None:
        loaded.wait()
        with psycopg.connect(database_url, autocommit=True) as db:
            for _ in range(6):
                # Every connection of the service, mid-statement or idle.
                db.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                    " AND pid NOT IN (pg_backend_pid(), %s)",
                    [own_backend],
                )
                time.sleep(0.3)  # the load runs between two rounds
        killing.set()

    def order_and_pay(i: int) -> str:
        if i == 4:
            loaded.set()
        return str(client.order_and_pay()["customerId"])

    killer = threading.Thread(target=terminate_backends)
    killer.start()
    with ThreadPoolExecutor(4) as pool:
        customers = list(pool.map(order_and_pay, range(30)))
    killer.join()
    figures.recovery_s = seconds_until_finished(
        database_url, since=time.monotonic(), within_s=DATABASE_BACK_GOAL_S
    )

    found = figures.audited(audit(database_url, orders=customers, paid=customers))
    assert killing.is_set()
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert figures.recovery_s <= DATABASE_BACK_GOAL_S


@pytest.fixture
def own_database(
    broker: RedisServer, tmp_path: Path
) -> Iterator[tuple[PostgresCluster, Deployment, str]]:
    """A PostgreSQL of the scenario's own, to restart; the service on it, and a token."""
    with PostgresCluster() as cluster:
        cluster.create_database("orders")
        env = base_env(
            DATABASE_URL=cluster.url("orders"),
            CELERY_BROKER_URL=broker.url(),
            SECRET_KEY=settings.SECRET_KEY,
        )
        manage("migrate", "--verbosity=0", env=env)
        manage("seed_demo", env=env)
        token = manage("create_api_client", "faults", "client", env=env).splitlines()[-1]
        deployment = Deployment(env=env, var_dir=tmp_path)
        try:
            yield cluster, deployment, token
        finally:
            deployment.close()


def test_postgresql_restarted(own_database: tuple[PostgresCluster, Deployment, str]) -> None:
    cluster, deployment, token = own_database
    figures = Figures("PostgreSQL restarted", goal_s=DATABASE_BACK_GOAL_S)
    deployment.start_web()
    deployment.start_worker()
    web_workers = deployment.web_worker_pids()
    client = RetryingClient(deployment.service.base_url, token, figures)
    before = [client.place_order() for _ in range(4)]
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "while-down"}
    order: dict[str, Any] = {
        "customerId": "while-down",
        "items": [{"sku": "ABC", "qty": 1}],
        "currency": "RUB",
    }

    cluster.stop()
    asked_at = time.monotonic()
    refused = requests.post(
        deployment.service.url("/v1/orders"), json=order, headers=headers, timeout=30
    )
    refused_in_s = time.monotonic() - asked_at
    ready = requests.get(deployment.service.url("/readyz"), timeout=30)
    with ThreadPoolExecutor(4) as pool:
        # Retried through the outage, each under its own key.
        placing = pool.submit(lambda: [client.place_order() for _ in range(4)])
        paying = pool.submit(lambda: [client.pay(o) for o in before])
        retried = pool.submit(client.place_order, "while-down")
        time.sleep(2)  # the outage lasts while the clients retry
        cluster.start()
        back_at = time.monotonic()
        after = placing.result()
        paid = paying.result()
        retried.result()
    figures.recovery_s = seconds_until_finished(
        cluster.url("orders"), since=back_at, within_s=DATABASE_BACK_GOAL_S
    )

    customers = [o["customerId"] for o in [*before, *after]] + ["while-down"]
    found = figures.audited(
        audit(cluster.url("orders"), orders=customers, paid=[o["customerId"] for o in before])
    )
    assert refused.status_code == 503
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert refused.json()["error"] == "ServiceUnavailable"
    assert int(refused.headers["Retry-After"]) > 0
    assert refused_in_s < 5
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] is False
    assert len(paid) == len(before)
    assert figures.server_errors > 0
    assert deployment.web_worker_pids() == web_workers
    assert all(worker.poll() is None for worker in deployment.workers)
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert figures.recovery_s <= DATABASE_BACK_GOAL_S
