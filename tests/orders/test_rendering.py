"""A command's answer and its event render the order without DRF, to OrderOutput's bytes.

orders/rendering.py's ``order_of`` and ``order_command_answer`` are a
speed trick (docs/SCALING.md): these tests hold them to the serializers
that define the representation, for a new order, a paid one and a
cancelled one, and fail if the commands stop using them.
"""

from typing import Any

import pytest
from rest_framework.renderers import JSONRenderer

from events.models import Event
from operations.models import Operation
from orders import selectors, services
from orders.models import Payment
from orders.rendering import order_command_answer, order_of
from orders.serializers import OrderCommandOutput, OrderOutput, PaymentAcceptedOutput
from tests.orders.conftest import PlaceOrders
from tests.support.http import Api, body_of, payment_body

pytestmark = pytest.mark.django_db


def _render(data: Any) -> bytes:
    rendered: bytes = JSONRenderer().render(data)
    return rendered


def test_an_order_renders_to_the_bytes_order_output_writes(
    api: Api, place_orders: PlaceOrders
) -> None:
    tenant = api.principal.tenant
    fresh, paid, cancelled = place_orders(tenant, count=3, lines=3)
    api.post("/v1/payments", payment_body(body_of(api.get(f"/v1/orders/{paid.id}"))), key="p")
    services.cancel_order(tenant=tenant, order_id=cancelled.id)

    for placed in (fresh, paid, cancelled):
        order = selectors.orders_of(tenant=tenant).get(pk=placed.pk)
        assert _render(order_of(order)) == _render(OrderOutput(order).data)
        assert _render(order_command_answer(order)) == _render(
            OrderCommandOutput(OrderCommandOutput.of(order)).data
        )


def test_placing_an_order_builds_no_serializer_of_it(
    api: Api, order_body: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a command renders through OrderOutput again, the trick is gone: this fails."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("OrderOutput was built")

    monkeypatch.setattr(OrderOutput, "__init__", refuse)

    placed = api.post("/v1/orders", order_body, key="K")

    assert placed.status_code == 201, placed.content
    order = body_of(placed)["order"]
    monkeypatch.undo()
    event = Event.objects.get(resource=f"/v1/orders/{order['id']}")
    assert event.data == order == body_of(api.get(f"/v1/orders/{order['id']}"))


def test_a_payments_answer_is_the_bytes_its_serializer_writes(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = body_of(api.post("/v1/orders", order_body, key="o"))["order"]

    accepted = api.post("/v1/payments", payment_body(order), key="p")

    payment = Payment.objects.get(pk=body_of(accepted)["paymentId"])
    operation = Operation.objects.get(result_id=payment.id)
    answer = PaymentAcceptedOutput.of(payment, operation)
    assert _render(answer) == _render(PaymentAcceptedOutput(answer).data) == accepted.content
