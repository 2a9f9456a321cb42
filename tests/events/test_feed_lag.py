"""The feed's lag behind the committed events is seen at /metrics.

A transaction left open anywhere on the PostgreSQL server, in another
database too, holds back every event committed after it began
(events.selectors.feed_of): ``events_feed_lag_seconds`` says for how long.
"""

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import Api, body_of

pytestmark = pytest.mark.django_db(transaction=True)


def feed_lag(client: Client) -> float:
    text = client.get("/metrics").content.decode()
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "events_feed_lag_seconds"
    ]
    (sample,) = family.samples
    return sample.value


@pytest.fixture
def elsewhere() -> Iterator[psycopg.Connection[Any]]:
    """A connection to another database of the same server."""
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres"
    ) as other:
        yield other


def test_a_transaction_open_elsewhere_on_the_server_makes_the_feed_lag_until_it_ends(
    api: Api, order_body: dict[str, Any], client: Client, elsewhere: psycopg.Connection[Any]
) -> None:
    assert feed_lag(client) == 0
    # Not autocommit: the transaction stays open, and a transaction id makes
    # it one that the feed's horizon waits for (a read-only one has none).
    elsewhere.execute("SELECT pg_current_xact_id()")

    placed = api.post("/v1/orders", order_body, key="K")
    first = feed_lag(client)
    second = feed_lag(client)

    assert placed.status_code == 201
    assert 0 < first < second < 60
    assert body_of(api.get("/v1/events"))["results"] == []

    elsewhere.rollback()

    assert feed_lag(client) == 0
    (event,) = body_of(api.get("/v1/events"))["results"]
    assert event["links"]["resource"] == body_of(placed)["links"]["self"]
