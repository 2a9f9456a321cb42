"""The metrics an operator alerts on (deploy/prometheus/rules.yml), each moved by the real event."""

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from pytest_django import DjangoAssertNumQueries, Settings

from idempotency.headers import key_digest
from idempotency.models import IdempotencyKey
from idempotency.retention import purge
from orders.models import Product
from tests.api.test_database_unavailable import table_locked, table_of, unreachable_database
from tests.observability.test_observability import json_lines
from tests.orders.test_payment_endings import place_order
from tests.support.concurrency import FinishedOperation
from tests.support.http import Api, body_of, payment_body

pytestmark = pytest.mark.django_db(transaction=True)

CHARGE = "payment.charge"


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


Until = Callable[[Callable[[], bool]], None]


@pytest.fixture
def until_tasks_settle() -> Iterator[Until]:
    """Wait until ``condition()`` holds, woken by each task the worker ends.

    A worker counts an operation's end once its transaction has committed,
    a moment after the row that finished_operation reads shows it.
    """
    from celery.signals import task_postrun

    ended = threading.Condition()

    def on_task_end(**kwargs: Any) -> None:
        with ended:
            ended.notify_all()

    task_postrun.connect(on_task_end, weak=False)

    def wait(condition: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with ended:
            while not condition():
                remaining = deadline - time.monotonic()
                assert remaining > 0, "the metric did not reach its value"
                # Only a guard against a task that ended between the check and the wait.
                ended.wait(timeout=min(remaining, 0.5))

    yield wait
    task_postrun.disconnect(on_task_end)


def pay(api: Api, method: str, key: str = "pay") -> str:
    accepted = api.post("/v1/payments", payment_body(place_order(api, f"o-{key}"), method), key=key)
    assert accepted.status_code == 202
    return str(body_of(accepted)["operationId"])


def scrape(client: Client) -> dict[str, float]:
    """``/metrics`` as {'name{label="v",…}': value}, labels sorted."""
    response = client.get("/metrics")
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def test_a_payment_counts_its_provider_call_its_end_and_its_attempts(
    api: Api, worker: None, finished_operation: FinishedOperation, until_tasks_settle: Until
) -> None:
    calls = value("provider_calls_total", call="charge", result="succeeded")
    ended = value("operations_ended_total", kind=CHARGE, status="succeeded")
    attempts = value("operation_attempts_sum", kind=CHARGE, status="succeeded")

    finished_operation(pay(api, "pm_card_ok"))

    until_tasks_settle(
        lambda: value("operations_ended_total", kind=CHARGE, status="succeeded") == ended + 1
    )
    assert value("provider_calls_total", call="charge", result="succeeded") == calls + 1
    assert value("operation_attempts_sum", kind=CHARGE, status="succeeded") == attempts + 1


def test_an_operation_out_of_attempts_is_counted_exhausted_with_each_refused_call(
    api: Api,
    settings: Settings,
    worker: None,
    finished_operation: FinishedOperation,
    until_tasks_settle: Until,
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 3
    exhausted = value(
        "operations_attempts_exhausted_total", kind=CHARGE, error="ProviderUnavailable"
    )
    refused = value("provider_calls_total", call="charge", result="unavailable")
    looked_up = value("provider_calls_total", call="look_up", result="not_found")
    attempts = value("operation_attempts_sum", kind=CHARGE, status="failed")

    finished_operation(pay(api, "pm_card_provider_down"))

    until_tasks_settle(
        lambda: (
            value("operations_attempts_exhausted_total", kind=CHARGE, error="ProviderUnavailable")
            == exhausted + 1
        )
    )
    assert value("provider_calls_total", call="charge", result="unavailable") == refused + 3
    # Before it is called failed, the provider is asked whether it holds a charge.
    assert value("provider_calls_total", call="look_up", result="not_found") == looked_up + 1
    assert value("operation_attempts_sum", kind=CHARGE, status="failed") == attempts + 3


def test_a_declined_payment_ends_failed_without_exhausting_its_budget(
    api: Api, worker: None, finished_operation: FinishedOperation, until_tasks_settle: Until
) -> None:
    failed = value("operations_ended_total", kind=CHARGE, status="failed")
    exhausted = sum(
        value("operations_attempts_exhausted_total", kind=CHARGE, error=error)
        for error in ("ProviderUnavailable", "InternalError")
    )

    finished_operation(pay(api, "pm_card_declined"))

    until_tasks_settle(
        lambda: value("operations_ended_total", kind=CHARGE, status="failed") == failed + 1
    )
    assert value("provider_calls_total", call="charge", result="declined") >= 1
    assert exhausted == sum(
        value("operations_attempts_exhausted_total", kind=CHARGE, error=error)
        for error in ("ProviderUnavailable", "InternalError")
    )


def test_a_command_the_database_fails_under_is_counted_unavailable_not_refused(
    api: Api, order_body: dict[str, Any], settings: Settings
) -> None:
    command = "POST /v1/orders"
    unavailable = value("idempotency_outcomes_total", command=command, outcome="unavailable")
    refused = value("idempotency_outcomes_total", command=command, outcome="refused")
    settings.IDEMPOTENCY_WAIT = 0.2  # the command's lock_timeout

    # The command reads the catalog after it has claimed its key; the lock
    # wait is cut short, as a failing database would cut it.
    with table_locked(table_of(Product), terminate_waiter=False):
        assert api.post("/v1/orders", order_body, key="K").status_code == 503

    assert value("idempotency_outcomes_total", command=command, outcome="unavailable") == (
        unavailable + 1
    )
    assert value("idempotency_outcomes_total", command=command, outcome="refused") == refused


def test_metrics_still_answer_while_the_database_is_unreachable_and_say_so(
    client: Client,
) -> None:
    assert scrape(client)['service_ready{check="database"}'] == 1

    with unreachable_database():
        samples = scrape(client)

    assert samples['service_ready{check="database"}'] == 0
    assert samples['service_ready{check="broker"}'] == 1
    # What is read from the database is left out, not made up.
    assert not [name for name in samples if name.startswith("operations{")]
    assert "idempotency_purge_lag_seconds{}" not in samples


def test_the_purge_lag_is_the_oldest_expired_key_and_ends_with_the_purge(
    api: Api, order_body: dict[str, Any], client: Client
) -> None:
    api.post("/v1/orders", order_body, key="old")
    api.post("/v1/orders", order_body, key="live")
    assert scrape(client)["idempotency_purge_lag_seconds{}"] == 0

    IdempotencyKey.objects.filter(key="old").update(expires_at=timezone.now() - timedelta(hours=3))
    lag = scrape(client)["idempotency_purge_lag_seconds{}"]
    assert 3 * 3600 <= lag < 3 * 3600 + 60

    purge(pause=0)
    assert scrape(client)["idempotency_purge_lag_seconds{}"] == 0


def test_the_key_table_size_is_the_planners_estimate(
    api: Api, order_body: dict[str, Any], client: Client
) -> None:
    for n in range(5):
        api.post("/v1/orders", order_body, key=f"k{n}")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {IdempotencyKey._meta.db_table}")

    assert scrape(client)["idempotency_keys_estimated_rows{}"] == 5


def test_a_commands_log_line_follows_its_key_by_digest_never_by_the_key(
    api: Api, order_body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    key = "customer-42-order-1"

    api.post("/v1/orders", order_body, key=key)
    api.post("/v1/orders", order_body, key=f'"{key}"')  # the structured form: the same key
    api.post("/v1/orders", order_body, key="another")

    lines = json_lines(caplog, "request")
    digests = [line["idempotency_key_digest"] for line in lines]
    assert digests[0] == digests[1] == key_digest(key)
    assert digests[2] != digests[0]
    assert all(key not in json.dumps(line) for line in lines)
    printed = StringIO()
    call_command("idempotency_key_digest", key, stdout=printed)
    assert printed.getvalue().strip() == digests[0]


def test_a_payments_log_lines_name_its_operation(
    api: Api,
    worker: None,
    finished_operation: FinishedOperation,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    body = payment_body(place_order(api), "pm_card_ok")
    operation_id = body_of(api.post("/v1/payments", body, key="pay"))["operationId"]
    finished_operation(operation_id)
    api.post("/v1/payments", body, key="pay")  # a replay: the same operation

    requests = [line for line in json_lines(caplog, "request") if line["path"] == "/v1/payments"]
    assert [line.get("operation_id") for line in requests] == [operation_id, operation_id]
    assert [line["operation_id"] for line in json_lines(caplog, "task")] == [operation_id]


def test_a_scrape_reads_the_database_in_a_fixed_number_of_queries(
    client: Client, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    # Processing operations by kind; the ended ones' kept count (a few
    # rows); the oldest processing one of each of the three kinds (an
    # index probe each); those out of attempts (one statement on the same
    # index); the key table's size and the purge's lag (one statement); the
    # oldest pending webhook delivery and the failing endpoints; the event
    # feed's lag (an index probe); readiness's SELECT 1.
    with django_assert_num_queries(11):
        assert client.get("/metrics").status_code == 200
