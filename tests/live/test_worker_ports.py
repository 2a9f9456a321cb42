"""Several Celery workers on one host: each serves its own counts, and none runs unseen.

As docs/DEPLOYING.md runs them (*Workers*): one worker per queue, each with
a ``WORKER_METRICS_PORT`` of its own. A third started on a port another
holds would have its work counted nowhere while a scrape of that port
showed the other's: it refuses to start instead.
"""

import subprocess
from pathlib import Path

import pytest
import requests
from django.conf import settings

from tests.support import servers
from tests.support.http import ORDER, Api
from tests.support.live import (
    BIN,
    ROOT,
    free_port,
    post_command,
    serve,
    suite_database_env,
    wait_until_answering,
)
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def worker(
    name: str, queue: str, port: int, env: dict[str, str], logs: Path
) -> "subprocess.Popen[bytes]":
    return servers.start(
        f"celery worker {name}",
        [
            str(BIN / "celery"),
            *("-A", "config", "worker", "-Q", queue, "-n", f"{name}@%h", "--pool=solo"),
            "--loglevel=INFO",
        ],
        log=logs / f"{name}.log",
        cwd=ROOT,
        env={**env, "WORKER_METRICS_PORT": str(port)},
    )


def charges_ended(port: int) -> float:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    prefix = 'operations_ended_total{kind="payment.charge",status="succeeded"} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert lines, f"no {prefix.strip()} on port {port}"
    return float(lines[0].removeprefix(prefix))


def test_two_workers_on_one_host_are_each_scraped_and_a_third_on_a_taken_port_stops(
    api: Api, tmp_path: Path
) -> None:
    env = suite_database_env(
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL, VAR_DIR=str(tmp_path), DEBUG="0"
    )
    payments_port, deliveries_port = free_port(), free_port()
    payments = worker("payments", settings.CELERY_TASK_DEFAULT_QUEUE, payments_port, env, tmp_path)
    deliveries = worker("deliveries", settings.WEBHOOK_QUEUE, deliveries_port, env, tmp_path)
    try:
        for port, process in ((payments_port, payments), (deliveries_port, deliveries)):
            wait_until_answering(f"http://127.0.0.1:{port}/metrics", [process])
        with serve(env, web_workers=1) as service:
            order = post_command(
                service.url("/v1/orders"), ORDER, token=api.token, key="order"
            ).json()["order"]
            body = {
                "orderId": order["id"],
                "amount": order["totalAmount"],
                "currency": order["currency"],
                "paymentMethod": "pm_card_ok",
            }
            accepted = post_command(service.url("/v1/payments"), body, token=api.token, key="pay")
            assert accepted.status_code == 202, accepted.text

            # The charge ran on the payments worker, and only its port says so.
            wait_for(
                lambda: charges_ended(payments_port),
                lambda n: n == 1,
                30,
                what="the charge counted by the payments worker",
            )
            assert charges_ended(deliveries_port) == 0

        third = worker("third", settings.WEBHOOK_QUEUE, deliveries_port, env, tmp_path)
        status = third.wait(timeout=60)
        log = (tmp_path / "third.log").read_text()
        assert status == 1, log
        assert f"worker metrics cannot be served on port {deliveries_port}" in log
        assert charges_ended(deliveries_port) == 0  # the deliveries worker still serves it
    finally:
        servers.stop([payments, deliveries])
