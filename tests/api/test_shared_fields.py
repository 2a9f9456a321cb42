"""Serializers built on SharedFields build their fields once, and still judge each body alone.

api/shared_fields.py is a speed trick (docs/SCALING.md): this fails if
``CreateOrderInput``'s instances stop sharing their fields, or if sharing
them lets one request's errors or data reach another's.
"""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pytest_django import Settings

from orders.serializers import CreateOrderInput, CreatePaymentInput, PaymentMethodField
from provider.simulator import SimulatedProvider


class OneMethodGateway(SimulatedProvider):
    payment_methods = {"pm_only": "The one method of this provider."}


GOOD = {"customerId": "c", "currency": "RUB", "items": [{"sku": "ABC", "qty": 2}]}
BAD = {"customerId": 7, "currency": "rub", "items": [{"sku": "ABC", "qty": 0}]}


def test_an_order_inputs_fields_are_built_once() -> None:
    first, second = CreateOrderInput(data=GOOD), CreateOrderInput(data=BAD)

    assert first.fields is second.fields
    line, other_line = (
        payload.fields["items"].child  # type: ignore[attr-defined]
        for payload in (first, CreateOrderInput(data=GOOD))
    )
    assert line.fields is other_line.fields


def test_a_payment_inputs_fields_are_built_once_and_its_methods_follow_the_gateway(
    settings: Settings,
) -> None:
    first, second = CreatePaymentInput(data={}), CreatePaymentInput(data={})
    assert first.fields is second.fields
    method: PaymentMethodField = first.fields["paymentMethod"]  # type: ignore[assignment]

    settings.PAYMENT_GATEWAY = "tests.api.test_shared_fields.OneMethodGateway"

    assert list(method.choices) == ["pm_only"]
    payload = CreatePaymentInput(
        data={"orderId": "ord_1", "amount": 1, "currency": "RUB", "paymentMethod": "pm_card_ok"}
    )
    assert not payload.is_valid()
    assert payload.errors["paymentMethod"] == ["Not a payment method of this provider: pm_only."]


def test_bodies_validated_at_once_keep_their_own_errors_and_data() -> None:
    def judge(body: dict[str, Any]) -> tuple[bool, Any]:
        payload = CreateOrderInput(data=body)
        valid = payload.is_valid()
        return valid, payload.validated_data if valid else payload.errors

    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(judge, [GOOD, BAD] * 200))

    for (valid, found), body in zip(verdicts, [GOOD, BAD] * 200, strict=True):
        if body is GOOD:
            assert valid
            assert found["items"] == [{"sku": "ABC", "qty": 2}]
        else:
            assert not valid
            assert set(found) == {"customerId", "currency", "items"}
