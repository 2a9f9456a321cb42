"""A tenant's delivery attempts in flight: at most WEBHOOK_TENANT_CONCURRENCY, across workers.

The bound is held by the database (events.tenant_slots), so it is tested
with real PostgreSQL transactions in real threads; and with a real worker
delivering to real receivers: an attempt over the bound waits, uncounted,
and another tenant's delivery does not wait for it.
"""

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from celery.signals import task_postrun
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django import Settings

from accounts.models import Tenant
from accounts.services import create_api_client
from events import tenant_slots
from events.delivery import _send_next as send_next
from events.delivery import deliver, give_up
from events.models import Delivery, DeliverySlot
from operations.attempts import claim_operation
from operations.models import Operation
from operations.registry import Failure
from tests.support.concurrency import run_concurrently
from tests.support.http import Api
from tests.support.receiver import hostile, receiving
from tests.support.waits import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BOUND = 3


@pytest.fixture
def bound(settings: Settings) -> int:
    settings.WEBHOOK_TENANT_CONCURRENCY = BOUND
    return BOUND


def tenant(slug: str) -> int:
    return int(Tenant.objects.get_or_create(slug=slug)[0].pk)


def hold(seconds: float = 30.0) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)


def test_concurrent_attempts_never_hold_more_slots_than_the_bound(bound: int) -> None:
    acme = tenant("acme")
    until = hold()

    def take(n: int) -> bool:
        return tenant_slots.take(tenant_id=acme, operation_id=f"op_{n}", until=until)

    # The tenant's first attempts make its slots; later ones find them made.
    first = run_concurrently(12, take)
    DeliverySlot.objects.update(busy_until=None, busy_by="")
    again = run_concurrently(12, take)

    assert first.count(True) == bound
    assert again.count(True) == bound
    assert DeliverySlot.objects.filter(tenant=acme).count() == bound
    assert DeliverySlot.objects.filter(busy_until=until).count() == bound
    assert not tenant_slots.has_room(acme)


def test_the_bound_is_each_tenant_s_own(bound: int) -> None:
    acme, other = tenant("acme"), tenant("other")
    for n in range(bound):
        assert tenant_slots.take(tenant_id=acme, operation_id=f"op_{n}", until=hold())

    over = tenant_slots.take(tenant_id=acme, operation_id="op_over", until=hold())
    taken = tenant_slots.take(tenant_id=other, operation_id="op_other", until=hold())

    assert not over
    assert taken


def test_a_slot_let_go_or_lapsed_is_taken_again_and_an_operation_takes_its_own_back(
    bound: int,
) -> None:
    acme = tenant("acme")
    until = hold()
    for n in range(bound - 1):
        tenant_slots.take(tenant_id=acme, operation_id=f"op_{n}", until=until)
    # A dead worker's hold: it lapsed a second ago.
    tenant_slots.take(tenant_id=acme, operation_id="op_dead", until=hold(-1))

    released = tenant_slots.release(tenant_id=acme, operation_id="op_0", until=until)
    after_release = tenant_slots.take(tenant_id=acme, operation_id="op_a", until=hold())
    after_lapse = tenant_slots.take(tenant_id=acme, operation_id="op_b", until=hold())
    full = tenant_slots.take(tenant_id=acme, operation_id="op_c", until=hold())
    own = tenant_slots.take(tenant_id=acme, operation_id="op_b", until=hold())

    assert released
    assert after_release
    assert after_lapse
    assert own
    assert not full
    assert DeliverySlot.objects.filter(busy_by="op_b").count() == 1
    assert not DeliverySlot.objects.filter(busy_by="op_dead").exists()


def test_a_lowered_bound_counts_only_the_slots_below_it(bound: int, settings: Settings) -> None:
    acme = tenant("acme")
    for n in range(bound):
        tenant_slots.take(tenant_id=acme, operation_id=f"op_{n}", until=hold())
    DeliverySlot.objects.filter(number=0).update(busy_until=None, busy_by="")

    settings.WEBHOOK_TENANT_CONCURRENCY = 1
    taken = tenant_slots.take(tenant_id=acme, operation_id="op_x", until=hold())
    over = tenant_slots.take(tenant_id=acme, operation_id="op_y", until=hold())

    assert taken
    assert not over


# --- With a worker ------------------------------------------------------------


def other_tenant_api() -> Api:
    issued = create_api_client(tenant_slug="other", name="carol")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


def subscribe(api: Api, url: str, key: str) -> None:
    response = api.post("/v1/webhook-endpoints", {"url": url, "eventTypes": ["*"]}, key=key)
    assert response.status_code == 201, response.content


def place(api: Api, key: str) -> str:
    body = {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
    response = api.post("/v1/orders", body, key=key)
    assert response.status_code == 201, response.content
    order_id: str = response.json()["orderId"]
    return order_id


def _close_connection(**kwargs: Any) -> None:
    connection.close()


@pytest.fixture
def delivering(broker: None, settings: Settings) -> Iterator[None]:
    """A deliveries worker of 3 threads; each tenant may take 1 of them."""
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    settings.WEBHOOK_RETRY_BACKOFF = 0.05
    settings.WEBHOOK_TIMEOUT = 2.0
    settings.WEBHOOK_TENANT_CONCURRENCY = 1
    # Each of the pool's threads has a connection of its own: closed as it
    # ends each task, or the test database could not be dropped.
    task_postrun.connect(_close_connection, weak=False)
    try:
        with start_worker(
            app, pool="threads", concurrency=3, perform_ping_check=False, loglevel="WARNING"
        ):
            yield
    finally:
        task_postrun.disconnect(_close_connection)


def held_back() -> Delivery | None:
    return Delivery.objects.filter(held_at__isnull=False, status="pending").first()


def test_an_attempt_over_the_bound_waits_uncounted_and_another_tenant_s_does_not(
    api: Api, delivering: None, settings: Settings
) -> None:
    # One attempt each, so that the test ends with every delivery ended.
    settings.WEBHOOK_MAX_ATTEMPTS = 1
    other = other_tenant_api()
    with hostile("silent") as first, hostile("silent") as second, receiving() as fast:
        subscribe(api, first.url, key="first")
        subscribe(api, second.url, key="second")
        subscribe(other, fast.url, key="fast")

        place(api, key="slow")
        # One attempt holds the tenant's one slot; the other delivery waits.
        wait_until(lambda: first.connections + second.connections, what="one slow attempt")
        wait_until(held_back, what="the other delivery held back")
        placed = place(other, key="order")
        fast.wait_for(1, timeout=10)
        still_held = held_back()
        # As the slow attempt ends (WEBHOOK_TIMEOUT), the held one is sent on.
        wait_until(
            lambda: not Operation.objects.filter(status="processing").exists(),
            10,
            what="both slow deliveries attempted, one after the other",
        )

    assert placed.encode() in fast.received[0].body
    assert still_held is not None
    assert still_held.attempts == 0
    assert first.connections == second.connections == 1
    slow = Delivery.objects.filter(tenant__slug="acme")
    assert [(d.status, d.attempts, d.held_at) for d in slow] == [("failed", 1, None)] * 2
    assert DeliverySlot.objects.filter(tenant__slug="acme").count() == 1


def test_giving_up_lets_the_slot_go_and_sends_the_held_delivery_on(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.WEBHOOK_TENANT_CONCURRENCY = 1
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    with receiving() as first, receiving() as second:
        subscribe(api, first.url, key="first")
        subscribe(api, second.url, key="second")
        place(api, key="O")
    dying, held = Operation.objects.filter(kind="webhook.deliver").order_by("created_at")
    acme = dying.tenant_id
    # The dying attempt's worker was lost holding the slot; the other
    # delivery waits, held back, without a message.
    assert tenant_slots.take(tenant_id=acme, operation_id=dying.pk, until=hold())
    Delivery.objects.filter(pk=held.result_id).update(held_at=timezone.now())
    Operation.objects.filter(pk=held.pk).update(published_at=None, claimed_until=None)

    give_up(dying, Failure("InternalError", "lost"))

    assert tenant_slots.has_room(acme)
    assert Operation.objects.get(pk=held.pk).published_at is not None
    assert Delivery.objects.get(pk=dying.result_id).status == "failed"


def test_a_freed_slot_goes_to_the_delivery_held_longest_and_the_endpoint_s_next_queues_behind(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    with receiving() as busy, receiving() as other:
        subscribe(api, busy.url, key="busy")
        subscribe(api, other.url, key="other")
        place(api, key="O")
    # Every delivery waits without a message: one of the other endpoint's
    # held back by the bound, and the busy endpoint's for the endpoint.
    Operation.objects.update(published_at=None, claimed_until=None)
    waiting_for_endpoint, held = Delivery.objects.order_by("endpoint__url")
    if waiting_for_endpoint.endpoint.url != busy.url:
        waiting_for_endpoint, held = held, waiting_for_endpoint
    Delivery.objects.filter(pk=held.pk).update(held_at=timezone.now())

    send_next(waiting_for_endpoint.endpoint_id, waiting_for_endpoint.tenant_id)

    published = Operation.objects.filter(published_at__isnull=False)
    assert [o.result_id for o in published] == [held.pk]
    # The endpoint's own is held back behind it, not sent to lose the race.
    assert Delivery.objects.get(pk=waiting_for_endpoint.pk).held_at is not None


def test_with_nothing_held_the_endpoint_s_next_is_sent_on(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    with receiving() as receiver:
        subscribe(api, receiver.url, key="S")
        place(api, key="O")
    Operation.objects.update(published_at=None, claimed_until=None)
    waiting = Delivery.objects.get()

    send_next(waiting.endpoint_id, waiting.tenant_id)

    assert Operation.objects.get().published_at is not None
    assert Delivery.objects.get().held_at is None


def test_an_attempt_costs_two_statements_on_the_slots_and_one_look_for_held_deliveries(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    with receiving() as receiver:
        subscribe(api, receiver.url, key="S")
        place(api, key="first")
        # The tenant's first attempt makes its slot; the one measured finds it.
        deliver(claim(Operation.objects.get(kind="webhook.deliver")))
        place(api, key="second")
        measured = claim(Operation.objects.get(kind="webhook.deliver", status="processing"))

        with CaptureQueriesContext(connection) as captured:
            deliver(measured)

    statements = [q["sql"] for q in captured.captured_queries]
    on_slots = [sql for sql in statements if "events_deliveryslot" in sql]
    held_looks = [sql for sql in statements if '"events_delivery"."held_at" IS NOT NULL' in sql]
    assert [sql.split()[0] for sql in on_slots] == ["UPDATE", "UPDATE"]
    assert len(held_looks) == 1
    assert Operation.objects.get(pk=measured.pk).status == "succeeded"


def claim(operation: Operation) -> Operation:
    claimed = claim_operation(operation.pk)
    assert claimed is not None
    return claimed


# --- The deliveries worker's slots ---------------------------------------------


def worker_with(pool: str, concurrency: int, queues: tuple[str, ...]) -> SimpleNamespace:
    """What config.celery's start-up check reads of a worker."""
    consumed = SimpleNamespace(consume_from=dict.fromkeys(queues))
    return SimpleNamespace(
        pool_cls=pool,
        concurrency=concurrency,
        app=SimpleNamespace(amqp=SimpleNamespace(queues=consumed)),
    )


@pytest.mark.parametrize(
    ("pool", "concurrency", "queues", "warned"),
    [
        ("solo", 8, ("webhooks",), True),
        ("threads", 4, ("webhooks",), True),
        ("threads", 5, ("webhooks",), False),
        ("prefork", 2, ("celery", "webhooks"), True),
        ("prefork", 2, ("celery",), False),
    ],
)
def test_a_deliveries_worker_with_no_more_slots_than_the_bound_says_so_as_it_starts(
    caplog: pytest.LogCaptureFixture,
    settings: Settings,
    pool: str,
    concurrency: int,
    queues: tuple[str, ...],
    warned: bool,
) -> None:
    from config.celery import _warn_of_too_few_delivery_slots

    settings.WEBHOOK_TENANT_CONCURRENCY = 4
    with caplog.at_level(logging.WARNING, logger="config.celery"):
        _warn_of_too_few_delivery_slots("worker@host", worker_with(pool, concurrency, queues))

    said = [r for r in caplog.records if "WEBHOOK_TENANT_CONCURRENCY" in str(r.msg)]
    assert bool(said) == warned
