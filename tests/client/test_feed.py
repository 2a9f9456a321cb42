"""Reading the event feed: pages in order, a checkpoint committed with the effect, a lost one named.

The feed's pages are scripted on an ``httpx.MockTransport`` (tests/client/fakes.py);
the checkpoint is a real SQLite file. tests/live/test_client_feed.py reads
the running service's feed.
"""

import asyncio
import sqlite3
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from order_service_client import (
    AsyncOrderServiceClient,
    FeedCheckpointLost,
    FeedCheckpointMoved,
    MemoryInbox,
    OrderServiceClient,
    SQLiteFeedCheckpoint,
    ValidationFailed,
)

from tests.client.fakes import (
    BASE_URL,
    TOKEN,
    FakeTime,
    Outcome,
    Script,
    answer,
    client_for,
    problem,
)
from tests.client.tally import Crash, consumer_database, counted, rows, tally

AFTER_UNKNOWN = {
    "after": [
        "Names no event of yours: events are kept 30 days or more; "
        "read from the start, or from a cursor."
    ]
}


def event(number: int, type: str = "order.created") -> dict[str, Any]:
    return {
        "id": f"evt_{number}",
        "type": type,
        "createdAt": "2026-12-01T10:00:00Z",
        "data": {"id": f"ord_{number}", "status": "pending"},
        "links": {"self": f"/v1/events/evt_{number}", "resource": f"/v1/orders/ord_{number}"},
    }


def page(*numbers: int, more: bool) -> Outcome:
    """A page of the feed as the service answers it; ``more``: it has a ``next`` link."""
    return answer(
        200,
        {
            "results": [event(number) for number in numbers],
            "next": "/v1/events?cursor=signed" if more else None,
            "previous": None,
            "nextCursor": "signed" if more else None,
            "previousCursor": None,
        },
    )


def feed(*pages: tuple[int, ...]) -> Script:
    """The feed in ``pages``, each but the last with a ``next`` link."""
    last = len(pages) - 1
    return Script(
        *(page(*numbers, more=index < last) for index, numbers in enumerate(pages)),
        time=FakeTime(),
    )


def queries(script: Script) -> list[dict[str, str]]:
    return [dict(sent.request.url.params) for sent in script.sent]


# Reading: oldest first, each page after the last event read.


def test_a_read_from_the_start_asks_each_page_after_the_last_event_read() -> None:
    script = feed((1, 2), (3, 4), (5,))

    with client_for(script) as client:
        ids = [each["id"] for each in client.list_events(page_size=2)]

    assert ids == ["evt_1", "evt_2", "evt_3", "evt_4", "evt_5"]
    assert queries(script) == [
        {"pageSize": "2"},
        {"pageSize": "2", "after": "evt_2"},
        {"pageSize": "2", "after": "evt_4"},
    ]
    assert all(sent.request.url.path == "/v1/events" for sent in script.sent)


def test_a_read_from_a_checkpoint_keeps_its_type_and_starts_after_it() -> None:
    script = feed((8, 9), (10,))

    with client_for(script) as client:
        ids = [
            each["id"]
            for each in client.list_events(after="evt_7", type="payment.succeeded", page_size=2)
        ]

    assert ids == ["evt_8", "evt_9", "evt_10"]
    assert queries(script) == [
        {"pageSize": "2", "type": "payment.succeeded", "after": "evt_7"},
        {"pageSize": "2", "type": "payment.succeeded", "after": "evt_9"},
    ]


def test_the_read_stops_at_the_feeds_end_and_fetches_a_page_only_when_the_last_is_consumed() -> (
    None
):
    script = feed((1, 2), (3,))

    with client_for(script) as client:
        events = client.list_events(page_size=2)
        first = next(events)
        sent_before_the_page_is_consumed = len(script.sent)
        rest = [each["id"] for each in events]

    assert first["id"] == "evt_1"
    assert sent_before_the_page_is_consumed == 1
    assert rest == ["evt_2", "evt_3"]
    assert len(script.sent) == 2


def test_an_empty_feed_is_one_request_and_no_event() -> None:
    script = feed(())

    with client_for(script) as client:
        ids = list(client.list_events())

    assert ids == []
    assert queries(script) == [{"pageSize": "50"}]


def test_an_empty_page_with_a_next_link_ends_the_read_rather_than_ask_the_same_page_again() -> None:
    script = Script(page(more=True), page(1, more=False), time=FakeTime())

    with client_for(script) as client:
        ids = list(client.list_events(after="evt_0"))

    assert ids == []
    assert len(script.sent) == 1


# Past the retention: the checkpoint names no event.


def test_a_checkpoint_the_feed_no_longer_holds_is_a_typed_error_that_says_what_to_do() -> None:
    script = Script(problem(400, "ValidationError", details=AFTER_UNKNOWN), time=FakeTime())

    with client_for(script) as client, pytest.raises(FeedCheckpointLost) as raised:
        list(client.list_events(after="evt_purged"))

    lost = raised.value
    assert isinstance(lost, ValidationFailed)
    assert lost.after == "evt_purged"
    assert lost.status == 400
    assert lost.error == "ValidationError"
    assert lost.trace_id == "trace-1"
    assert lost.details == AFTER_UNKNOWN
    assert "evt_purged" in str(lost)
    assert "Rebuild your state from the resources" in str(lost)
    assert "from its start (after=None)" in str(lost)
    # A 400 is final: asked once, never retried.
    assert len(script.sent) == 1


def test_the_last_event_read_purged_between_two_pages_is_named_not_the_first_checkpoint() -> None:
    script = Script(
        page(1, 2, more=True),
        problem(400, "ValidationError", details=AFTER_UNKNOWN),
        time=FakeTime(),
    )
    read: list[str] = []

    with client_for(script) as client, pytest.raises(FeedCheckpointLost) as raised:
        read.extend(each["id"] for each in client.list_events(after="evt_0", page_size=2))

    assert read == ["evt_1", "evt_2"]
    assert raised.value.after == "evt_2"


def test_a_refused_type_is_a_validation_error_not_a_lost_checkpoint() -> None:
    details = {"type": ["Must be one of: order.created, order.cancelled."]}
    script = Script(problem(400, "ValidationError", details=details), time=FakeTime())

    with client_for(script) as client, pytest.raises(ValidationFailed) as raised:
        list(client.list_events(after="evt_1", type="order.shipped"))

    assert not isinstance(raised.value, FeedCheckpointLost)
    assert raised.value.details == details


def test_a_read_from_the_start_never_reports_a_lost_checkpoint() -> None:
    # A cursor refused (another SECRET_KEY) on a read with no `after` is no checkpoint's loss.
    details = {"after": ["Names no event of yours."]}
    script = Script(problem(400, "ValidationError", details=details), time=FakeTime())

    with client_for(script) as client, pytest.raises(ValidationFailed) as raised:
        list(client.list_events())

    assert not isinstance(raised.value, FeedCheckpointLost)


def test_the_async_client_reads_the_same_pages_and_names_a_lost_checkpoint() -> None:
    script = Script(
        page(1, 2, more=True),
        page(3, more=False),
        problem(400, "ValidationError", details=AFTER_UNKNOWN),
        time=FakeTime(),
    )

    async def read() -> tuple[list[str], FeedCheckpointLost]:
        async with AsyncOrderServiceClient(
            BASE_URL,
            TOKEN,
            transport=httpx.MockTransport(script),
            sleep=script.time.async_sleep,
            clock=script.time.clock,
        ) as client:
            ids = [each["id"] async for each in client.list_events(page_size=2)]
            with pytest.raises(FeedCheckpointLost) as raised:
                [each async for each in client.list_events(after="evt_gone")]
        return ids, raised.value

    ids, lost = asyncio.run(read())

    assert ids == ["evt_1", "evt_2", "evt_3"]
    assert queries(script) == [
        {"pageSize": "2"},
        {"pageSize": "2", "after": "evt_2"},
        {"pageSize": "50", "after": "evt_gone"},
    ]
    assert lost.after == "evt_gone"


# The checkpoint: moved in the transaction of the effect.


@pytest.fixture
def consumer(tmp_path: Path) -> Path:
    """The consumer's own SQLite file: its tables, where the checkpoint goes too."""
    return consumer_database(tmp_path / "consumer.sqlite3")


def consume(
    client: OrderServiceClient, checkpoint: SQLiteFeedCheckpoint, *, crash_at: str | None = None
) -> None:
    for each in client.list_events(after=checkpoint.position(), page_size=2):
        checkpoint.handle(each, partial(tally, event=each, crash_at=crash_at))


def test_a_crash_inside_the_handler_undoes_its_effect_and_the_rerun_makes_each_effect_once(
    consumer: Path,
) -> None:
    script = Script(
        page(1, 2, more=True),
        page(3, 4, more=True),
        # The rerun: from evt_2, the last event whose effect committed.
        page(3, 4, more=True),
        page(5, more=False),
        time=FakeTime(),
    )

    with client_for(script) as client:
        with pytest.raises(Crash):
            consume(client, SQLiteFeedCheckpoint(consumer), crash_at="evt_3")
        after_the_crash = (counted(consumer), SQLiteFeedCheckpoint(consumer).position())
        consume(client, SQLiteFeedCheckpoint(consumer))

    assert after_the_crash == (["evt_1", "evt_2"], "evt_2")
    assert counted(consumer) == ["evt_1", "evt_2", "evt_3", "evt_4", "evt_5"]
    assert rows(consumer, "SELECT type, n FROM tally") == [("order.created", 5)]
    assert SQLiteFeedCheckpoint(consumer).position() == "evt_5"
    assert queries(script)[2] == {"pageSize": "2", "after": "evt_2"}


def test_a_second_reader_of_the_checkpoint_stops_and_its_effect_is_rolled_back(
    consumer: Path,
) -> None:
    first, second = SQLiteFeedCheckpoint(consumer), SQLiteFeedCheckpoint(consumer)
    start = first.position()
    assert second.position() == start

    first.handle(event(1), partial(tally, event=event(1)))
    with pytest.raises(FeedCheckpointMoved) as raised:
        second.handle(event(1), partial(tally, event=event(1)))

    assert counted(consumer) == ["evt_1"]
    assert (raised.value.expected, raised.value.found) == (None, "evt_1")
    assert SQLiteFeedCheckpoint(consumer).position() == "evt_1"


def test_a_checkpoint_is_moved_only_from_a_position_read(consumer: Path) -> None:
    checkpoint = SQLiteFeedCheckpoint(consumer)

    with pytest.raises(RuntimeError, match="position"):
        checkpoint.handle(event(1), partial(tally, event=event(1)))

    assert counted(consumer) == []


def test_checkpoints_of_one_file_are_kept_apart_by_name(consumer: Path) -> None:
    orders = SQLiteFeedCheckpoint(consumer, name="orders")
    payments = SQLiteFeedCheckpoint(consumer, name="payments")
    orders.position()
    payments.position()

    orders.handle(event(4))
    payments.handle(event(2))

    assert SQLiteFeedCheckpoint(consumer, name="orders").position() == "evt_4"
    assert SQLiteFeedCheckpoint(consumer, name="payments").position() == "evt_2"
    assert SQLiteFeedCheckpoint(consumer).position() is None


def test_reset_commits_the_rebuild_with_a_return_to_the_start_or_neither(consumer: Path) -> None:
    checkpoint = SQLiteFeedCheckpoint(consumer)
    checkpoint.position()
    checkpoint.handle(event(1), partial(tally, event=event(1)))

    def rebuild(db: sqlite3.Connection, *, fail: bool) -> None:
        db.execute("DELETE FROM counted")
        db.execute("INSERT INTO counted (event_id) VALUES ('rebuilt')")
        if fail:
            raise Crash("rebuild")

    with pytest.raises(Crash):
        checkpoint.reset(partial(rebuild, fail=True))
    after_the_failed_rebuild = (counted(consumer), SQLiteFeedCheckpoint(consumer).position())
    checkpoint.reset(partial(rebuild, fail=False))

    assert after_the_failed_rebuild == (["evt_1"], "evt_1")
    assert counted(consumer) == ["rebuilt"]
    assert SQLiteFeedCheckpoint(consumer).position() is None
    checkpoint.handle(event(2))
    assert SQLiteFeedCheckpoint(consumer).position() == "evt_2"


def test_an_inbox_makes_the_event_read_again_after_a_crash_before_the_checkpoint_harmless(
    consumer: Path,
) -> None:
    inbox = MemoryInbox()
    sent: list[str] = []
    # The effect lives elsewhere (an email): the inbox made it for evt_1, and
    # the process died before the checkpoint moved.
    inbox.handle("evt_1", partial(sent.append, "evt_1"))
    script = feed((1, 2))
    checkpoint = SQLiteFeedCheckpoint(consumer)

    with client_for(script) as client:
        ran: list[bool] = []
        for each in client.list_events(after=checkpoint.position()):
            ran.append(inbox.handle(each["id"], partial(sent.append, each["id"])))
            checkpoint.handle(each)

    assert ran == [False, True]
    assert sent == ["evt_1", "evt_2"]
    assert SQLiteFeedCheckpoint(consumer).position() == "evt_2"


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_a_checkpoint_needs_a_file(path: str) -> None:
    with pytest.raises(ValueError, match="needs a file"):
        SQLiteFeedCheckpoint(path)
