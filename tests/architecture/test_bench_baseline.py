"""The bench's baselines: the bare view is the service's own, the plain view sends
the ceiling's statements, and only the bench serves either."""

import inspect
import re

import pytest
from django.db import connection
from django.test import override_settings
from django.urls import Resolver404, resolve
from psycopg.pq import TransactionStatus

from events.models import Event
from idempotency.models import IdempotencyKey, StoredAnswer
from orders.models import Order
from orders.views import OrderCollection
from tests.bench.plain_view import STATEMENTS
from tests.bench.urls import BareOrders
from tests.support.http import Api


def test_the_service_never_serves_the_bare_baseline() -> None:
    with pytest.raises(Resolver404):
        resolve("/bench/bare/orders")


def test_the_baseline_is_the_command_view_without_its_protocol() -> None:
    assert getattr(OrderCollection.post, "idempotent_command", False)
    assert not hasattr(BareOrders.post, "idempotent_command")
    assert BareOrders.post is inspect.unwrap(OrderCollection.post)
    view = resolve("/bench/bare/orders", urlconf="tests.bench.urls").func
    assert getattr(view, "view_class", None) is BareOrders


def test_the_service_never_serves_the_plain_view() -> None:
    with pytest.raises(Resolver404):
        resolve("/bench/plain/orders")


def test_the_plain_view_sends_the_ceilings_statements_in_its_order() -> None:
    kinds = [" ".join(statement.split()[:3]) for statement in STATEMENTS]

    assert kinds == [
        "SELECT t.id, t.principal_id,",
        "BEGIN",
        "INSERT INTO idempotency_idempotencykey",
        "SELECT sku, unit_price,",
        "INSERT INTO orders_order",
        "INSERT INTO orders_orderitem",
        "INSERT INTO events_event",
        "INSERT INTO idempotency_storedanswer",
        "COMMIT",
    ]
    # Every variable pgbench would put in is one the plain view puts in too.
    used = set(re.findall(r"(?<!:):([A-Za-z_]\w*)", "\n".join(STATEMENTS)))
    assert used == {"digest", "principal", "tenant", "client_id", "key_id", "k"}


@pytest.mark.django_db(transaction=True)
def test_the_plain_view_writes_what_a_create_writes(api: Api) -> None:
    with override_settings(ROOT_URLCONF="tests.bench.urls"):
        answer = api.client.post(
            "/bench/plain/orders", b"{}", content_type="application/json", headers=api.headers()
        )

    assert answer.status_code == 201, answer.content
    order = Order.objects.get(id=answer.json()["orderId"])
    assert order.tenant_id == api.principal.tenant_id
    assert order.items.count() == 1
    assert Event.objects.filter(resource=f"/v1/orders/{order.id}").count() == 1
    key = IdempotencyKey.objects.get(principal=api.principal)
    assert StoredAnswer.objects.filter(key_id=key.pk, status=201).exists()
    # The script's own COMMIT ended its transaction: the connection is left idle.
    assert connection.connection.info.transaction_status == TransactionStatus.IDLE
