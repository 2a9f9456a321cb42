"""The metrics the alert rules read, scraped from the service as deployed.

gunicorn and a real ``celery worker`` with the prefork pool, each child
replaced after one task (``--max-tasks-per-child=1``): what the worker
counted survives its children, its metrics directory does not grow with
them, promtool reads both scrapes, and every metric that
deploy/prometheus/rules.yml reads is there. A metric renamed in the code
breaks this test, not an alert at night.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.test_alert_rules import metric_names_in_rules, promtool
from tests.support import servers
from tests.support.http import ORDER, Api
from tests.support.live import (
    BIN,
    ROOT,
    LiveService,
    free_port,
    post_command,
    serve,
    suite_database_env,
    wait_until_answering,
)
from tests.support.waits import describe, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CHILDREN = 2
MAX_ATTEMPTS = 2


class Deployment:
    def __init__(self, service: LiveService, worker_metrics: str, temp: Path) -> None:
        self.service = service
        self.worker_metrics = worker_metrics
        self.temp = temp

    def metrics_files(self) -> list[Path]:
        (directory,) = self.temp.glob("order-service-worker-metrics-*")
        return sorted(directory.glob("*.db"))


@pytest.fixture(scope="module")
def deployment(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    from django.conf import settings

    from config.celery import app

    temp = tmp_path_factory.mktemp("tmp")
    port = free_port()
    env = suite_database_env(
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        VAR_DIR=str(tmp_path_factory.mktemp("var")),
        DEBUG="0",
        WORKER_METRICS_PORT=str(port),
        # Where the worker makes its metrics directory (tempfile.mkdtemp).
        TMPDIR=str(temp),
        OPERATION_MAX_ATTEMPTS=str(MAX_ATTEMPTS),
        PAYMENT_RETRY_BACKOFF="0.05",
        PAYMENT_PROVIDER_LATENCY="0",
    )
    app.control.purge()
    worker = servers.start(
        "celery worker",
        [
            str(BIN / "celery"),
            *("-A", "config", "worker", "--pool=prefork", f"--concurrency={CHILDREN}"),
            *("--max-tasks-per-child=1", "--loglevel=WARNING"),
        ],
        log=tmp_path_factory.mktemp("logs") / "celery-worker.log",
        cwd=ROOT,
        env=env,
    )
    try:
        with serve(env, web_workers=1) as service:
            # The worker serves its metrics once it has started, which can be
            # after gunicorn is healthy: a first scrape before then is refused.
            worker_metrics = f"http://127.0.0.1:{port}/metrics"
            wait_until_answering(worker_metrics, [worker])
            yield Deployment(service, worker_metrics, temp)
    finally:
        servers.stop([worker])


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(url: str) -> Samples:
    text = scrape(url)
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(url: str) -> str:
    response = requests.get(url, timeout=10)
    assert response.status_code == 200, describe(response)
    return response.text


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def pay(deployment: Deployment, api: Api, method: str, key: str) -> str:
    url = deployment.service.url
    order = post_command(url("/v1/orders"), ORDER, token=api.token, key=f"o-{key}").json()["order"]
    body = {
        "orderId": order["id"],
        "amount": order["totalAmount"],
        "currency": order["currency"],
        "paymentMethod": method,
    }
    accepted = post_command(url("/v1/payments"), body, token=api.token, key=key)
    assert accepted.status_code == 202
    return str(accepted.json()["operationId"])


def test_a_workers_counts_survive_its_children_and_its_files_stay_few(
    deployment: Deployment, api: Api
) -> None:
    for n in range(4):
        pay(deployment, api, "pm_card_ok", f"ok-{n}")
    pay(deployment, api, "pm_card_provider_down", "down")

    def ended() -> dict[str, float]:
        found = samples(deployment.worker_metrics)
        return {
            status: value(found, "operations_ended_total", kind="payment.charge", status=status)
            for status in ("succeeded", "failed")
        }

    # Another process's counters: polled, as Prometheus does.
    wait_for(
        ended,
        lambda by_status: by_status == {"succeeded": 4, "failed": 1},
        60,
        interval=0.1,
        what="the worker's metrics counting 4 payments succeeded and 1 failed",
    )
    found = samples(deployment.worker_metrics)
    assert value(found, "provider_calls_total", call="charge", result="succeeded") == 4
    assert value(found, "provider_calls_total", call="charge", result="unavailable") == MAX_ATTEMPTS
    assert value(found, "provider_calls_total", call="look_up", result="not_found") == 1
    assert (
        value(
            found,
            "operations_attempts_exhausted_total",
            kind="payment.charge",
            error="ProviderUnavailable",
        )
        == 1
    )
    # Seven tasks, each in a child of its own: the ended children's files
    # were folded into the archive. Left: the live processes' (the main one
    # and its children) and the archive's, a counter and a histogram file each.
    assert len(deployment.metrics_files()) <= 2 * (1 + CHILDREN + 1)


def test_promtool_reads_the_scrapes_and_they_have_every_metric_the_rules_read(
    deployment: Deployment, api: Api
) -> None:
    # A command and a payment, so that the series with labels exist.
    ended = pay(deployment, api, "pm_card_ok", "read")
    wait_for(
        lambda: requests.get(
            deployment.service.url(f"/v1/operations/{ended}"),
            headers={"Authorization": f"Bearer {api.token}"},
            timeout=10,
        ).json()["status"],
        lambda status: status != "processing",
        60,
        interval=0.1,
        what=f"operation {ended} ending",
    )
    names = set()
    for url in (deployment.service.url("/metrics"), deployment.worker_metrics):
        promtool("check", "metrics", stdin=scrape(url))
        names |= {name for name, _ in samples(url)}

    assert metric_names_in_rules() - names == set()
