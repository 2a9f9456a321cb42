"""Several machines behind a real load balancer keep the contract as one does.

Three web nodes, each its own gunicorn (two worker processes) with its own
environment, on an address of its own, as three machines; two Celery
workers, each its own process with its own node name; one PostgreSQL
database and one broker; and HAProxy in front, round robin, with the
configuration users run (deploy/haproxy/haproxy.cfg, through
tests/support/balancer.py). Every request goes through the balancer, so the
copies of one command land on different machines, and nothing but the
database can keep them to one effect.
"""

import io
import json
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from django.core.management import call_command

from orders.models import Order, Payment
from tests.support import servers
from tests.support.balancer import Balancer, balance, port_free_on_every_address
from tests.support.concurrency import run_concurrently
from tests.support.edge import nginx
from tests.support.http import ORDER, Api, payment_body
from tests.support.live import (
    ROOT,
    LiveService,
    celery_worker_command,
    operation_ended,
    post_command,
    serve,
    suite_database_env,
)
from tests.support.waits import wait_for

# Transactional: the nodes and workers are other processes, which see only
# what is committed.
pytestmark = pytest.mark.django_db(transaction=True)

# Each node an address of its own: 127.0.0.0/8 is all this machine on Linux.
NODE_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
WORKER_NAMES = ("w1", "w2")
STORM = 64


@dataclass(frozen=True)
class Cluster:
    balancer: Balancer
    nodes: Sequence[LiveService]
    # The Celery workers' node names (w1@host, w2@host).
    workers: Sequence[str]

    def url(self, path: str) -> str:
        """``path`` through the balancer."""
        return self.balancer.service.url(path)


def node_env(var_dir: Path) -> dict[str, str]:
    """One machine's environment: its own VAR_DIR, the shared database, broker and SECRET_KEY."""
    from django.conf import settings

    return suite_database_env(
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        VAR_DIR=str(var_dir),
        DEBUG="0",
        # Each node is also called by its own address (the balancer's health checks).
        ALLOWED_HOSTS=",".join(("localhost", "127.0.0.1", *NODE_HOSTS)),
        # As Compose runs web: behind proxies that set X-Forwarded-For.
        BEHIND_PROXY="true",
        # 3 nodes x 2 processes x 4 threads: 24 database connections at most,
        # well under PostgreSQL's 100, which other suites share.
        WEB_THREADS="4",
    )


def answering_workers() -> set[str]:
    """The node names of the Celery workers that answer a ping on the suite's broker."""
    from config.celery import app

    return {name for reply in app.control.ping(timeout=0.5) for name in reply}


@contextmanager
def celery_workers(envs: Mapping[str, Mapping[str, str]]) -> Iterator[list[str]]:
    """A Celery worker process per name (``-n name@%h``); yields the node names once all answer."""
    with servers.workspace("celery-workers-") as logs:
        processes = [
            servers.start(
                f"celery worker {name}",
                celery_worker_command(name),
                log=logs / f"{name}.log",
                cwd=ROOT,
                env=dict(env),
            )
            for name, env in envs.items()
        ]

        def answering() -> list[str]:
            assert all(p.poll() is None for p in processes), (
                f"a Celery worker exited\n{servers.evidence()}"
            )
            return sorted(answering_workers())

        try:
            # A worker says nothing when it is ready; its answer to a ping is the sign.
            names = wait_for(
                answering,
                lambda names: len(names) >= len(envs),
                30,
                interval=0,  # each ping waits half a second for its answers
                what=f"Celery workers {sorted(envs)} answering a ping",
            )
            assert [name.split("@")[0] for name in names] == sorted(envs)
            yield names
        finally:
            servers.stop(processes)


@pytest.fixture(scope="module")
def cluster(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    from config.celery import app

    # Messages of earlier runs name operations that no longer exist.
    app.control.purge()
    port = port_free_on_every_address()
    with ExitStack() as stack:
        nodes = [
            stack.enter_context(
                serve(
                    node_env(tmp_path_factory.mktemp(f"node{i}")),
                    web_workers=2,
                    host=host,
                    port=port,
                )
            )
            for i, host in enumerate(NODE_HOSTS, 1)
        ]
        workers = stack.enter_context(
            celery_workers({name: node_env(tmp_path_factory.mktemp(name)) for name in WORKER_NAMES})
        )
        balancer = stack.enter_context(balance(nodes))
        yield Cluster(balancer=balancer, nodes=nodes, workers=workers)


def post(cluster: Cluster, path: str, token: str, key: str, body: Any) -> requests.Response:
    return post_command(cluster.url(path), body, token=token, key=key, timeout=60)


def place_order(cluster: Cluster, token: str, key: str) -> dict[str, Any]:
    response = post(cluster, "/v1/orders", token, key, ORDER)
    assert response.status_code == 201
    order: dict[str, Any] = response.json()["order"]
    return order


def finished(cluster: Cluster, token: str, operation_id: str) -> dict[str, Any]:
    """Poll an operation through the balancer, as a client does, until it leaves processing."""
    url = cluster.url(f"/v1/operations/{operation_id}")
    return operation_ended(url, {"Authorization": f"Bearer {token}"})


def charges() -> Counter[str]:
    """The provider's charges per payment id, from its own ledger (manage.py provider_ledger)."""
    out = io.StringIO()
    call_command("provider_ledger", stdout=out)
    entries = [json.loads(line) for line in out.getvalue().splitlines()]
    return Counter(e["paymentId"] for e in entries if e["kind"] == "charge")


def served_by_node(balancer: Balancer, before: Mapping[str, int]) -> dict[str, int]:
    """Requests the balancer forwarded to each node since ``before``."""
    return {node: count - before[node] for node, count in balancer.forwarded().items()}


def test_a_storm_of_one_order_across_nodes_executes_once(cluster: Cluster, api: Api) -> None:
    before = cluster.balancer.forwarded()

    responses = run_concurrently(
        STORM, lambda i: post(cluster, "/v1/orders", api.token, "storm", ORDER)
    )

    spread = served_by_node(cluster.balancer, before)
    # Shown with the test's output (pytest -rP), and on a failure.
    print(f"requests per node: {spread}")
    assert set(spread) == {node.base_url.removeprefix("http://") for node in cluster.nodes}
    assert sum(spread.values()) == STORM
    assert sum(count > 0 for count in spread.values()) >= 2, spread
    assert {r.status_code for r in responses} == {201}
    assert len({r.content for r in responses}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in responses) == 1
    assert Order.objects.count() == 1


def test_a_storm_of_one_payment_across_nodes_charges_once(cluster: Cluster, api: Api) -> None:
    order = place_order(cluster, api.token, "order-1")
    body = payment_body(order)
    before = cluster.balancer.forwarded()

    responses = run_concurrently(
        STORM, lambda i: post(cluster, "/v1/payments", api.token, "pay-storm", body)
    )

    assert sum(n > 0 for n in served_by_node(cluster.balancer, before).values()) >= 2
    assert {r.status_code for r in responses} == {202}
    answers = [r.json() for r in responses]
    [(payment_id, operation_id)] = {(a["paymentId"], a["operationId"]) for a in answers}
    assert {r.headers["Location"] for r in responses} == {f"/v1/operations/{operation_id}"}
    assert sum("Idempotent-Replayed" not in r.headers for r in responses) == 1
    operation = finished(cluster, api.token, operation_id)
    assert (operation["status"], operation["resultId"]) == ("succeeded", payment_id)
    assert charges() == {payment_id: 1}
    assert list(Payment.objects.values_list("id", flat=True)) == [payment_id]


def test_a_storm_of_payments_of_one_order_under_different_keys_charges_once(
    cluster: Cluster, api: Api
) -> None:
    order = place_order(cluster, api.token, "order-1")
    body = payment_body(order)

    responses = run_concurrently(
        STORM, lambda i: post(cluster, "/v1/payments", api.token, f"pay-{i}", body)
    )

    [accepted] = [r for r in responses if r.status_code == 202]
    refused = Counter((r.status_code, r.json()["error"]) for r in responses if r.status_code != 202)
    assert sum(refused.values()) == STORM - 1
    assert set(refused) <= {(409, "PaymentInProgress"), (409, "OrderAlreadyPaid")}, refused
    payment_id, operation_id = accepted.json()["paymentId"], accepted.json()["operationId"]
    assert finished(cluster, api.token, operation_id)["status"] == "succeeded"
    assert charges() == {payment_id: 1}
    assert Payment.objects.count() == 1


def test_orders_paid_through_the_balancer_are_each_charged_once(cluster: Cluster, api: Api) -> None:
    orders = [place_order(cluster, api.token, f"order-{i}") for i in range(8)]

    accepted = run_concurrently(
        len(orders),
        lambda i: post(cluster, "/v1/payments", api.token, f"pay-{i}", payment_body(orders[i])),
    )

    assert {r.status_code for r in accepted} == {202}
    operations = [finished(cluster, api.token, r.json()["operationId"]) for r in accepted]
    assert {o["status"] for o in operations} == {"succeeded"}
    assert charges() == {r.json()["paymentId"]: 1 for r in accepted}
    assert set(Order.objects.values_list("status", flat=True)) == {Order.Status.PAID}
    # Both workers took the queue all along (which ran what is the broker's choice).
    assert answering_workers() == set(cluster.workers)


def test_nginx_in_front_of_the_balancer_serves_the_command_as_compose_does(
    cluster: Cluster, api: Api, tmp_path: Path
) -> None:
    upstream = cluster.balancer.service.base_url.removeprefix("http://")
    headers = {
        "Authorization": f"Bearer {api.token}",
        "Idempotency-Key": "edge-1",
        "X-Request-ID": "edge-trace-1",
    }

    with nginx(upstream, tmp_path) as edge:
        created = requests.post(edge.url("/v1/orders"), json=ORDER, headers=headers, timeout=30)
        replayed = requests.post(edge.url("/v1/orders"), json=ORDER, headers=headers, timeout=30)

    assert (created.status_code, replayed.status_code) == (201, 201)
    assert replayed.content == created.content
    assert replayed.headers["Idempotent-Replayed"] == "true"
    # The client's id went through nginx and the balancer to the app unchanged.
    assert created.headers["X-Request-ID"] == "edge-trace-1"


def compose_balancer_healthcheck(balancer: Balancer) -> int:
    """Run the Compose file's healthcheck of the balancer against ``balancer``; its exit status."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"]["balancer"]["healthcheck"]["test"]
    assert command[:3] == ["CMD", "bash", "-c"]
    # Compose turns $$ into $; the port comes from BALANCER_BIND, as in the container.
    script = command[3].replace("$$", "$")
    host, port = balancer.service.address
    return subprocess.run(
        ["bash", "-c", script],  # noqa: S607 (bash, as the image finds it)
        env={"BALANCER_BIND": f"{host}:{port}"},
        capture_output=True,
        timeout=10,
        check=False,
    ).returncode


def test_the_compose_healthcheck_of_the_balancer_passes_only_while_a_node_serves(
    cluster: Cluster,
) -> None:
    with balance([]) as empty:
        assert compose_balancer_healthcheck(empty) != 0

    assert compose_balancer_healthcheck(cluster.balancer) == 0


def test_with_no_node_in_rotation_the_balancer_answers_a_retryable_problem() -> None:
    with balance([]) as empty:
        response = requests.post(
            empty.service.url("/v1/orders"),
            json=ORDER,
            headers={"Idempotency-Key": "k-1", "X-Request-ID": "trace-1"},
            timeout=10,
        )

    assert response.status_code == 503
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.headers["Retry-After"] == "1"
    assert response.headers["X-Request-ID"] == "trace-1"
    problem = response.json()
    assert (problem["error"], problem["status"], problem["traceId"]) == (
        "ServiceUnavailable",
        503,
        "trace-1",
    )
    assert "same Idempotency-Key" in problem["message"]
