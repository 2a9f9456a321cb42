"""Nothing is lost between commit and broker: the operation row is the outbox."""

import json
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from config.celery import app
from operations.models import Operation
from operations.services import claim_operation, publish, sweep_stale_operations
from provider.models import LedgerEntry
from tests.conftest import running_worker
from tests.live import serve, test_database_env

pytestmark = pytest.mark.django_db(transaction=True)


def pay(api, key: str = "p") -> dict:
    order = json.loads(
        api.post(
            "/v1/orders",
            {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"},
            key=f"order-{key}",
        ).content
    )["order"]
    response = api.post(
        "/v1/payments",
        {"orderId": order["id"], "amount": 1990, "currency": "RUB", "paymentMethod": "pm_card_ok"},
        key=key,
    )
    assert response.status_code == 202
    return json.loads(response.content)


@pytest.fixture
def service_with_broker_down(django_db_setup):
    # Nothing listens on port 1: every publish fails.
    env = test_database_env(CELERY_BROKER_URL="redis://127.0.0.1:1/0")
    with serve(env, web_workers=1) as service:
        yield service


def test_a_command_committed_while_the_broker_is_down_is_done_once_it_is_back(
    api, service_with_broker_down, worker, finished_operation, settings
):
    order = json.loads(
        api.post(
            "/v1/orders",
            {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"},
            key="o",
        ).content
    )["order"]

    response = requests.post(
        service_with_broker_down.url("/v1/payments"),
        json={
            "orderId": order["id"],
            "amount": 1990,
            "currency": "RUB",
            "paymentMethod": "pm_card_ok",
        },
        headers={"Authorization": f"Bearer {api.token}", "Idempotency-Key": "p"},
        timeout=30,
    )

    assert response.status_code == 202
    operation_id = response.json()["operationId"]
    assert Operation.objects.get(pk=operation_id).status == Operation.Status.PROCESSING
    assert LedgerEntry.objects.count() == 0
    # The broker is back (this process's broker is up); the sweep finds the work.
    settings.OPERATION_STALE_AFTER = 0
    assert sweep_stale_operations() == 1
    assert finished_operation(operation_id).status == Operation.Status.SUCCEEDED
    assert LedgerEntry.objects.count() == 1


def test_an_operation_of_a_dead_worker_is_picked_up_again_by_the_sweep(
    api, broker, finished_operation, settings
):
    settings.OPERATION_STALE_AFTER = 0
    accepted = pay(api)
    # A worker takes the task and dies holding it: its lease is taken and
    # its message is gone.
    assert claim_operation(accepted["operationId"]) is not None
    app.control.purge()

    with running_worker():
        while_held = sweep_stale_operations()
        Operation.objects.filter(pk=accepted["operationId"]).update(
            claimed_until=timezone.now() - timedelta(seconds=1)
        )
        after_lapse = sweep_stale_operations()
        operation = finished_operation(accepted["operationId"])

    assert while_held == 0
    assert after_lapse == 1
    assert operation.status == Operation.Status.SUCCEEDED
    assert operation.attempts == 2
    assert LedgerEntry.objects.count() == 1


def test_publishing_twice_is_harmless(api, worker, finished_operation):
    accepted = pay(api)

    publish(accepted["operationId"])
    publish(accepted["operationId"])

    operation = finished_operation(accepted["operationId"])
    assert operation.status == Operation.Status.SUCCEEDED
    assert LedgerEntry.objects.count() == 1
