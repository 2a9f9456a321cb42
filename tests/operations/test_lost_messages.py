"""A message is published again only when it is lost, never because it waits in a backlog.

The sweep tells the two apart by the queue's position (docs/SPECIFICATION.md
§4 rule 9): a message is lost once a worker has received one published
``OPERATION_STALE_AFTER`` after it, or once the queue is empty while it is
still untaken. However long a backlog, its operations get no copies.
"""

import os
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery.signals import task_postrun
from django.utils import timezone
from pytest_django import Settings

from config.celery import app
from operations.attempts import claim_operation
from operations.models import Operation
from operations.registry import default_queue
from operations.sweep import OperationSweep, sweep_lost_operations
from provider.models import LedgerEntry
from tests.support.concurrency import FinishedOperation, running_worker
from tests.support.http import Api, body_of, payment_body

pytestmark = pytest.mark.django_db(transaction=True)


def pay(api: Api, i: int) -> str:
    """Place an order of one ABC and pay it; the payment's operation id."""
    order = body_of(
        api.post(
            "/v1/orders",
            {"customerId": f"c{i}", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"},
            key=f"order-{i}",
        )
    )["order"]
    accepted = api.post("/v1/payments", payment_body(order), key=f"pay-{i}")
    assert accepted.status_code == 202
    return str(body_of(accepted)["operationId"])


def queued() -> int:
    """Messages waiting in the broker's queue."""
    with app.connection_for_read() as conn:
        try:
            return int(conn.default_channel.queue_declare(queue="celery", passive=True)[1])
        except conn.channel_errors:
            return 0  # Redis drops an empty list


def waited_long(operation_ids: list[str]) -> None:
    """As if each had waited in the queue for an hour since its publish."""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Operation.objects.filter(pk__in=operation_ids).update(
        published_at=an_hour_ago, republish_at=an_hour_ago
    )


@pytest.fixture
def tasks_run() -> Iterator[list[str]]:
    """The operation ids of the tasks the worker ran, in order."""
    ran: list[str] = []
    lock = threading.Lock()

    def on_task_end(kwargs: dict[str, Any] | None = None, **rest: Any) -> None:
        with lock:
            ran.append((kwargs or {}).get("operation_id", ""))

    task_postrun.connect(on_task_end, weak=False)
    yield ran
    task_postrun.disconnect(on_task_end)


def test_a_message_waiting_in_the_queue_is_not_copied_however_long_it_waits(
    api: Api, broker: None
) -> None:
    waiting = [pay(api, i) for i in range(3)]
    waited_long(waiting)

    published = sweep_lost_operations()

    assert published == 0
    assert queued() == 3
    assert set(Operation.objects.values_list("publications", flat=True)) == {1}


def test_a_message_the_queue_has_moved_past_is_copied(api: Api, broker: None) -> None:
    waiting = [pay(api, i) for i in range(3)]
    waited_long(waiting)

    # A worker has received a message published after them: theirs left the
    # queue before it, yet no worker claimed them.
    published = sweep_lost_operations(received_up_to={default_queue(): timezone.now()})
    again = sweep_lost_operations(received_up_to={default_queue(): timezone.now()})

    assert published == 3
    assert again == 0  # the copies are the newest messages now
    assert queued() == 6
    assert set(Operation.objects.values_list("publications", flat=True)) == {2}


def test_an_untaken_message_missing_from_an_empty_queue_is_copied(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.OPERATION_STALE_AFTER = 0
    operation_id = pay(api, 1)
    app.control.purge()  # the broker lost it (a Redis restarted without persistence)

    published = sweep_lost_operations()

    assert published == 1
    assert queued() == 1
    assert Operation.objects.get(pk=operation_id).publications == 2


def test_a_worker_judges_an_empty_queue_at_the_second_sweep_that_finds_it_empty(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.OPERATION_STALE_AFTER = 0
    operation_id = pay(api, 1)
    app.control.purge()  # the broker lost it
    found_empty: dict[str, datetime] = {}

    first = sweep_lost_operations(found_empty=found_empty)
    second = sweep_lost_operations(found_empty=found_empty)

    assert (first, second) == (0, 1)
    assert Operation.objects.get(pk=operation_id).publications == 2


def test_a_message_delivered_as_the_queue_emptied_is_not_copied(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.OPERATION_STALE_AFTER = 0
    operation_id = pay(api, 1)
    app.control.purge()  # delivered to a worker, which has not claimed it yet
    found_empty: dict[str, datetime] = {}

    first = sweep_lost_operations(found_empty=found_empty)
    claimed = claim_operation(operation_id)  # it has by the next sweep
    second = sweep_lost_operations(found_empty=found_empty)

    assert claimed is not None
    assert (first, second) == (0, 0)
    assert Operation.objects.get(pk=operation_id).publications == 1


def test_a_queue_found_holding_messages_is_judged_afresh(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.OPERATION_STALE_AFTER = 0
    pay(api, 1)
    found_empty = {default_queue(): timezone.now() - timedelta(hours=1)}

    published = sweep_lost_operations(found_empty=found_empty)

    assert published == 0  # its message waits in the queue
    assert default_queue() not in found_empty


def test_a_backlog_longer_than_the_stale_period_drains_with_one_message_per_operation(
    api: Api,
    broker: None,
    settings: Settings,
    tasks_run: list[str],
) -> None:
    # Twenty payments queued before a worker starts, a provider that takes
    # 0.1 s a call, and messages presumed lost after 0.3 s: the last one
    # waits ten times that long, with a sweep every 0.1 s.
    settings.OPERATION_STALE_AFTER = 0.3
    settings.OPERATION_SWEEP_INTERVAL = 0.1
    settings.PAYMENT_PROVIDER_LATENCY = 0.1
    operation_ids = [pay(api, i) for i in range(20)]

    with running_worker():
        finished = threading.Event()

        def done(**kwargs: Any) -> None:
            if not Operation.objects.filter(status=Operation.Status.PROCESSING).exists():
                finished.set()

        task_postrun.connect(done, weak=False)
        try:
            assert finished.wait(timeout=60), "the backlog did not drain"
        finally:
            task_postrun.disconnect(done)
        # Copies still queued when the last payment ended: each a task that
        # would have done nothing.
        left = queued()

    operations = Operation.objects.filter(pk__in=operation_ids)
    assert {o.status for o in operations} == {Operation.Status.SUCCEEDED}
    assert left == 0
    assert sorted(tasks_run) == sorted(operation_ids)  # no task ran for nothing
    assert {o.publications for o in operations} == {1}
    assert {o.attempts for o in operations} == {1}
    assert LedgerEntry.objects.count() == 20


def test_a_worker_knows_the_newest_publish_time_it_has_received(
    api: Api, broker: None, finished_operation: FinishedOperation
) -> None:
    operation_ids = [pay(api, i) for i in range(3)]

    with running_worker() as worker:
        for operation_id in operation_ids:
            finished_operation(operation_id)
        (sweep,) = [s for s in worker.consumer.steps if isinstance(s, OperationSweep)]
        received_up_to = sweep.position.received_up_to.get(default_queue())

    newest = Operation.objects.order_by("-published_at").values_list("published_at", flat=True)[0]
    assert received_up_to is not None
    assert newest is not None
    assert abs((received_up_to - newest).total_seconds()) < 0.001


class _Consumer:
    """What the sweep step needs of Celery's consumer: a timer it is not running."""

    def __init__(self) -> None:
        from kombu.asynchronous.timer import Timer

        self.timer = Timer()


def test_reconnections_add_no_signal_receivers(broker: None) -> None:
    from celery.signals import task_received

    consumer = _Consumer()
    step = OperationSweep(consumer)
    receivers = len(task_received.receivers)

    # Celery stops and starts the consumer's steps at each reconnection.
    counts = []
    for _ in range(5):
        step.start(consumer)
        counts.append(len(task_received.receivers))
        step.stop(consumer)

    assert counts == [receivers + 1] * 5
    assert len(task_received.receivers) == receivers


def test_sweeps_leave_no_connection_open(api: Api, broker: None) -> None:
    # Each sweep reads the queue's length over a connection of its own; a
    # worker sweeps every 2 s for months.
    pay(api, 1)
    sweep_lost_operations()
    open_before = len(os.listdir("/proc/self/fd"))

    for _ in range(200):
        sweep_lost_operations()

    assert len(os.listdir("/proc/self/fd")) <= open_before + 2
