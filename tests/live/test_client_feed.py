"""The client reading the running service's event feed: gunicorn on the suite's database.

A consumer reads the feed from its start with its checkpoint in the same
SQLite transaction as its effect, dies inside a handler, and resumes: every
event's effect is made once. A checkpoint the service purged, or never
issued, stops the read with FeedCheckpointLost, and the consumer rebuilds
and starts over. client/README.md's feed example runs as written, twice.
Orders and cancels of pending orders make the events; no worker is needed.
"""

import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from order_service_client import (
    FeedCheckpointLost,
    OrderServiceClient,
    SQLiteFeedCheckpoint,
)

from accounts.services import create_api_client
from events.models import Event
from events.retention import purge
from tests.client.tally import Crash, consumer_database, counted, rows, tally
from tests.support.live import ROOT, LiveService, base_env, serve, suite_database_env
from tests.support.waits import wait_for

ITEMS = [{"sku": "ABC", "qty": 1}]
# How long the feed may lag behind the database here: the oldest writing
# transaction on the server, which a slow test of another suite may hold.
FEED_LAG_BOUND_S = 60.0
README = ROOT / "client" / "README.md"
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def feed_service(django_db_setup: None) -> Iterator[LiveService]:
    with serve(suite_database_env(), web_workers=1) as service:
        yield service


@pytest.fixture
def consumer(tmp_path: Path) -> Path:
    """The consumer's own SQLite file: its tables, where its checkpoint goes too."""
    return consumer_database(
        tmp_path / "consumer.sqlite3", "CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT)"
    )


def consume(
    client: OrderServiceClient, checkpoint: SQLiteFeedCheckpoint, *, crash_at: str | None = None
) -> None:
    for event in client.list_events(after=checkpoint.position(), page_size=2):
        checkpoint.handle(event, partial(tally, event=event, crash_at=crash_at))


def place_and_cancel(client: OrderServiceClient, *, orders: int, cancelled: int) -> None:
    placed = [
        client.create_order(customer_id=f"c-{n}", currency="RUB", items=ITEMS).body["orderId"]
        for n in range(orders)
    ]
    for order_id in placed[:cancelled]:
        client.cancel(order_id)


def feed_order(tenant: str) -> list[str]:
    """The tenant's event ids in the feed's order, as the database holds them."""
    events = Event.objects.filter(tenant__slug=tenant).order_by("txid", "seq")
    return list(events.values_list("id", flat=True))


def shown(client: OrderServiceClient, tenant: str) -> list[str]:
    """Every event the database holds, once the feed shows them all; their ids, in order.

    The feed shows an event once every older transaction that wrote anything
    on the PostgreSQL server has ended (§4 rule 12, The feed), and other
    suites write on this server too: a reader that started at once could
    stop short of the end, as a consumer would, and read the rest later.
    """
    held = feed_order(tenant)
    wait_for(
        lambda: [event["id"] for event in client.list_events()],
        lambda read: read == held,
        FEED_LAG_BOUND_S,
        interval=0.05,
        what=f"the feed showing the {len(held)} events the database holds",
    )
    return held


@pytest.mark.django_db(transaction=True)
def test_a_consumer_killed_mid_feed_resumes_from_its_checkpoint_and_makes_each_effect_once(
    feed_service: LiveService, catalog: None, consumer: Path
) -> None:
    token = create_api_client(tenant_slug="feed", name="reader").token
    client = OrderServiceClient(feed_service.base_url, token)
    with client:
        place_and_cancel(client, orders=5, cancelled=2)
        events = shown(client, "feed")

        # Inside the fourth event's handler, after its effect was written.
        with pytest.raises(Crash):
            consume(client, SQLiteFeedCheckpoint(consumer), crash_at=events[3])
        after_the_crash = (counted(consumer), SQLiteFeedCheckpoint(consumer).position())
        consume(client, SQLiteFeedCheckpoint(consumer))
        consume(client, SQLiteFeedCheckpoint(consumer))

    assert len(events) == 7
    assert after_the_crash == (events[:3], events[2])
    assert counted(consumer) == events
    assert rows(consumer, "SELECT type, n FROM tally ORDER BY type") == [
        ("order.cancelled", 2),
        ("order.created", 5),
    ]
    assert SQLiteFeedCheckpoint(consumer).position() == events[-1]


def mirror(db: sqlite3.Connection, order: dict[str, Any]) -> None:
    """A state, not a count: the order as the event (or the rebuild) shows it."""
    db.execute(
        "INSERT INTO orders (id, status) VALUES (?, ?)"
        " ON CONFLICT (id) DO UPDATE SET status = excluded.status",
        (order["id"], order["status"]),
    )


def mirror_feed(client: OrderServiceClient, checkpoint: SQLiteFeedCheckpoint) -> None:
    for event in client.list_events(after=checkpoint.position(), page_size=2):
        checkpoint.handle(event, partial(mirror, order=event["data"]))


@pytest.mark.django_db(transaction=True)
def test_a_checkpoint_past_the_retention_stops_the_read_and_a_rebuild_starts_it_again(
    feed_service: LiveService, catalog: None, consumer: Path
) -> None:
    token = create_api_client(tenant_slug="feed", name="reader").token
    client = OrderServiceClient(feed_service.base_url, token)
    with client:
        place_and_cancel(client, orders=2, cancelled=0)
        shown(client, "feed")
        mirror_feed(client, SQLiteFeedCheckpoint(consumer))
        # The consumer is away for a month; the orders change meanwhile, and
        # the service purges the events it has kept for the retention.
        Event.objects.update(created_at=timezone.now() - timedelta(days=31))
        first = next(client.list_orders())["id"]
        client.cancel(first)
        place_and_cancel(client, orders=1, cancelled=0)
        purge()
        kept = shown(client, "feed")
        checkpoint = SQLiteFeedCheckpoint(consumer)
        stale = checkpoint.position()
        with pytest.raises(FeedCheckpointLost) as purged:
            mirror_feed(client, checkpoint)
        with pytest.raises(FeedCheckpointLost) as never_issued:
            list(client.list_events(after="evt_never_issued"))

        def rebuild(db: sqlite3.Connection) -> None:
            for order in client.list_orders():
                mirror(db, order)

        checkpoint.reset(rebuild)
        mirror_feed(client, checkpoint)
        service_orders = sorted((order["id"], order["status"]) for order in client.list_orders())

    assert stale is not None
    assert purged.value.after == stale
    assert purged.value.status == 400
    assert "Rebuild your state from the resources" in str(purged.value)
    assert never_issued.value.after == "evt_never_issued"
    assert len(kept) == 2
    assert SQLiteFeedCheckpoint(consumer).position() == kept[-1]
    assert rows(consumer, "SELECT id, status FROM orders ORDER BY id") == service_orders
    assert sorted(status for _, status in service_orders) == ["cancelled", "pending", "pending"]


def readme_feed_example() -> str:
    """The code of client/README.md's "Reading the event feed" section, its one python block."""
    section = README.read_text().split("\n## Reading the event feed\n", 1)[1].split("\n## ", 1)[0]
    blocks: list[str] = _PYTHON_BLOCK.findall(section)
    (code,) = blocks
    return code


def run_example(script: Path, service: LiveService, token: str) -> str:
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env=base_env(ORDER_SERVICE_URL=service.base_url, ORDER_SERVICE_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


@pytest.mark.django_db(transaction=True)
def test_the_readmes_feed_example_counts_each_event_once_over_two_runs(
    feed_service: LiveService, catalog: None, tmp_path: Path
) -> None:
    token = create_api_client(tenant_slug="feed", name="reader").token
    script = tmp_path / "feed.py"
    script.write_text(readme_feed_example())
    with OrderServiceClient(feed_service.base_url, token) as client:
        place_and_cancel(client, orders=2, cancelled=1)
        shown(client, "feed")

        first = run_example(script, feed_service, token)
        second = run_example(script, feed_service, token)
        place_and_cancel(client, orders=1, cancelled=0)
        shown(client, "feed")
        third = run_example(script, feed_service, token)

    assert first == "3 new order.cancelled=1 order.created=2"
    assert second == "0 new order.cancelled=1 order.created=2"
    assert third == "1 new order.cancelled=1 order.created=3"
