"""A first execution's statements are plain SQL written once, and write what the ORM would.

api/plain_writes.py and api/plain_reads.py are speed tricks
(docs/SCALING.md): these tests fail if the rows they write differ from
``create()``'s, if a model they serve gains what they skip (a ``save()``
of its own, a save signal), or if ``POST /v1/orders`` goes back to
compiling its queries through the ORM.
"""

from typing import Any

import pytest
from django.db.models import Model, signals
from django.db.models.sql.compiler import SQLCompiler

from accounts.models import Tenant
from api.plain_writes import PlainInsert
from events.models import Event
from operations.models import Operation
from orders.models import Order, OrderItem, Payment, Product
from tests.support.http import Api, body_of, payment_body

pytestmark = pytest.mark.django_db

SERVED = (Order, OrderItem, Event, Payment, Operation)


def _row(instance: Model) -> dict[str, Any]:
    """The row as the database holds it, without what each insert chooses anew."""
    row = type(instance)._default_manager.filter(pk=instance.pk).values().get()
    return {k: v for k, v in row.items() if k not in ("created_at", "updated_at", "id", "seq")}


def test_a_plain_insert_writes_the_row_create_writes(api: Api) -> None:
    tenant = Tenant.objects.get(pk=api.principal.tenant_id)
    fields = {"tenant": tenant, "customer_id": "c", "currency": "RUB", "total_amount": 10}
    created = Order.objects.create(internal_id="ord_a", id="ord_a", **fields)
    inserted = Order(internal_id="ord_b", id="ord_b", **fields)

    PlainInsert(Order).insert(inserted)

    assert _row(inserted) | {"internal_id": "ord_a"} == _row(created)
    assert not inserted._state.adding  # saved, as create() leaves it
    assert inserted.created_at is not None


def test_keys_the_database_generates_are_read_back(api: Api) -> None:
    Product.objects.get_or_create(sku="ABC", defaults={"unit_price": 1, "currency": "RUB"})
    tenant = Tenant.objects.get(pk=api.principal.tenant_id)
    order = Order.objects.create(
        internal_id="ord_c", id="ord_c", tenant=tenant, currency="RUB", total_amount=3
    )
    lines = [
        OrderItem(order=order, position=n, sku="ABC", qty=1, unit_price=1, line_total=1)
        for n in range(3)
    ]

    PlainInsert(OrderItem).insert(*lines)

    assert [line.pk for line in lines] == list(
        OrderItem.objects.filter(order=order).order_by("position").values_list("pk", flat=True)
    )


@pytest.mark.parametrize("model", SERVED, ids=lambda m: m.__name__)
def test_the_models_served_have_no_save_of_their_own_nor_save_signals(
    model: type[Model],
) -> None:
    """What a plain insert skips; a model that gains either must go back to create()."""
    assert model.save is Model.save
    assert model.save_base is Model.save_base
    for signal in (signals.pre_save, signals.post_save):
        assert not signal.has_listeners(model)


def test_a_first_execution_of_post_orders_compiles_no_orm_query(
    api: Api, order_body: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement it sends was written once; if one is compiled again, this fails."""
    api.post("/v1/orders", order_body, key="warm")  # each statement written once

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an ORM query was compiled")

    monkeypatch.setattr(SQLCompiler, "as_sql", refuse)
    placed = api.post("/v1/orders", order_body, key="K")
    monkeypatch.undo()

    assert placed.status_code == 201, placed.content
    order_id = body_of(placed)["orderId"]
    assert Event.objects.filter(resource=f"/v1/orders/{order_id}").count() == 1


def test_a_first_execution_of_post_payments_compiles_no_orm_query(
    api: Api, order_body: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    orders = [body_of(api.post("/v1/orders", order_body, key=f"o{n}"))["order"] for n in (1, 2)]
    api.post("/v1/payments", payment_body(orders[0]), key="warm")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an ORM query was compiled")

    monkeypatch.setattr(SQLCompiler, "as_sql", refuse)
    accepted = api.post("/v1/payments", payment_body(orders[1]), key="P")
    monkeypatch.undo()

    assert accepted.status_code == 202, accepted.content
    payment = Payment.objects.get(pk=body_of(accepted)["paymentId"])
    assert payment.order.id == orders[1]["id"]
    assert Operation.objects.filter(result_id=payment.id).count() == 1
