"""The client and the service's published policy, live: gunicorn on the suite's database.

The service runs with a retention of a minute; the client's clock (and its
key store's) is moved on rather than waited for, the one thing here that
is not as deployed.
"""

import time
from collections.abc import Iterator

import pytest
from order_service_client import KeyLifetimeOver, MemoryKeyStore, OrderServiceClient

from accounts.services import create_api_client
from orders.models import Order
from tests.support.live import LiveService, serve, suite_database_env

RETENTION_S = 60
ITEMS = [{"sku": "ABC", "qty": 1}]


@pytest.fixture(scope="module")
def short_retention_service(django_db_setup: None) -> Iterator[LiveService]:
    with serve(suite_database_env(IDEMPOTENCY_KEY_TTL=str(RETENTION_S)), web_workers=1) as service:
        yield service


class MovedClock:
    """Monotonic time, plus however far a test moved it."""

    def __init__(self) -> None:
        self.moved = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.moved


@pytest.mark.django_db(transaction=True)
def test_the_client_reads_the_live_policy_and_stops_at_its_retention(
    short_retention_service: LiveService, catalog: None
) -> None:
    token = create_api_client(tenant_slug="policy", name="client").token
    clock = MovedClock()
    # The store would keep the intent's key 24 h: the service's minute decides.
    keys = MemoryKeyStore(clock=clock)
    client = OrderServiceClient(
        short_retention_service.base_url, token, key_store=keys, clock=clock
    )

    with client:
        first = client.create_order(
            customer_id="late", currency="RUB", items=ITEMS, intent="cart-late"
        )
        policy = client.policy()
        clock.moved = RETENTION_S + 1.0
        with pytest.raises(KeyLifetimeOver) as raised:
            client.create_order(customer_id="late", currency="RUB", items=ITEMS, intent="cart-late")

    assert first.status == 201
    assert policy is not None
    assert policy.retention_seconds == RETENTION_S
    assert ("POST", "/v1/orders") in policy.commands
    assert raised.value.key == first.key
    assert raised.value.attempts == 0
    assert Order.objects.filter(customer_id="late").count() == 1
