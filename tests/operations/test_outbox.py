"""Nothing is lost between commit and broker: the operation row is the outbox."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.utils import timezone
from pytest_django import Settings

from config.celery import app
from operations.attempts import claim_operation, lease_kept
from operations.models import Operation
from operations.outbox import publish
from operations.registry import default_queue
from operations.sweep import sweep_lost_operations
from provider.models import LedgerEntry
from tests.support.concurrency import FinishedOperation, run_concurrently, running_worker
from tests.support.http import Api, body_of, payment_body
from tests.support.live import LiveService, serve, suite_database_env
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def place_order(api: Api, key: str) -> dict[str, Any]:
    """An order of one ABC (1990 RUB), as the API answers it."""
    created = api.post(
        "/v1/orders",
        {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"},
        key=key,
    )
    order: dict[str, Any] = body_of(created)["order"]
    return order


def pay(api: Api, key: str = "p") -> dict[str, Any]:
    order = place_order(api, key=f"order-{key}")
    response = api.post("/v1/payments", payment_body(order), key=key)
    assert response.status_code == 202
    accepted: dict[str, Any] = body_of(response)
    return accepted


@pytest.fixture
def service_with_broker_down(django_db_setup: None) -> Iterator[LiveService]:
    # Nothing listens on port 1: every publish fails.
    env = suite_database_env(CELERY_BROKER_URL="redis://127.0.0.1:1/0")
    with serve(env, web_workers=1) as service:
        yield service


def test_a_command_committed_while_the_broker_is_down_is_done_once_it_is_back(
    api: Api,
    service_with_broker_down: LiveService,
    worker: None,
    finished_operation: FinishedOperation,
) -> None:
    order = place_order(api, key="o")

    response = requests.post(
        service_with_broker_down.url("/v1/payments"),
        json=payment_body(order),
        headers={"Authorization": f"Bearer {api.token}", "Idempotency-Key": "p"},
        timeout=30,
    )

    assert response.status_code == 202
    operation_id = response.json()["operationId"]
    operation = Operation.objects.get(pk=operation_id)
    assert operation.status == Operation.Status.PROCESSING
    # Due at once, not after OPERATION_STALE_AFTER: its publish failed, and
    # no message of it is out.
    assert operation.republish_at <= timezone.now()
    assert (operation.published_at, operation.publications) == (None, 0)
    assert LedgerEntry.objects.count() == 0
    # The broker is back (this process's broker is up); the sweep finds the work.
    assert sweep_lost_operations() == 1
    assert finished_operation(operation_id).status == Operation.Status.SUCCEEDED
    assert LedgerEntry.objects.count() == 1


def test_an_operation_of_a_dead_worker_is_picked_up_again_by_the_sweep(
    api: Api, broker: None, finished_operation: FinishedOperation, settings: Settings
) -> None:
    settings.OPERATION_STALE_AFTER = 0
    accepted = pay(api)
    # A worker takes the task and dies holding it: its lease is taken and
    # its message is gone.
    assert claim_operation(accepted["operationId"]) is not None
    app.control.purge()

    with running_worker():
        while_held = sweep_lost_operations()
        # Its lease lapses (the sweep looks again when it ends).
        lapsed = timezone.now() - timedelta(seconds=1)
        Operation.objects.filter(pk=accepted["operationId"]).update(
            claimed_until=lapsed, republish_at=lapsed
        )
        after_lapse = sweep_lost_operations()
        operation = finished_operation(accepted["operationId"])

    assert while_held == 0
    assert after_lapse == 1
    assert operation.status == Operation.Status.SUCCEEDED
    assert operation.attempts == 2
    assert LedgerEntry.objects.count() == 1


def test_publishing_twice_is_harmless(
    api: Api, worker: None, finished_operation: FinishedOperation
) -> None:
    accepted = pay(api)

    publish(accepted["operationId"], queue=default_queue())
    publish(accepted["operationId"], queue=default_queue())

    operation = finished_operation(accepted["operationId"])
    assert operation.status == Operation.Status.SUCCEEDED
    assert LedgerEntry.objects.count() == 1


def test_concurrent_sweeps_publish_each_lost_operation_once(api: Api, broker: None) -> None:
    accepted = [pay(api, key=f"p{i}")["operationId"] for i in range(6)]
    app.control.purge()
    # Their publishes failed: each is lost, whatever the queue holds.
    Operation.objects.update(
        published_at=None, publications=0, republish_at=timezone.now() - timedelta(seconds=1)
    )

    published = run_concurrently(4, lambda _: sweep_lost_operations())

    assert sum(published) == len(accepted)
    assert sorted(Operation.objects.values_list("publications", flat=True)) == [1] * 6
    with app.connection_for_read() as conn:
        assert conn.default_channel.queue_declare(queue="celery", passive=True).message_count == 6
    # Each is due again only if no worker takes it meanwhile.
    assert not Operation.objects.filter(republish_at__lte=timezone.now()).exists()


def test_a_worker_renews_its_lease_while_it_works(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.OPERATION_LEASE = 0.3
    operation = claim_operation(pay(api)["operationId"])
    assert operation is not None
    first_lease = operation.claimed_until
    assert first_lease is not None

    with lease_kept(operation):
        wait_for(
            lambda: Operation.objects.get(pk=operation.pk).claimed_until,
            lambda lease: lease is not None and lease > first_lease,
            what=f"the lease renewed past {first_lease}",
        )
        renewed = Operation.objects.get(pk=operation.pk)

    assert renewed.status == Operation.Status.PROCESSING
    assert sweep_lost_operations() == 0
