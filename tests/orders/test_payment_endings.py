"""How a charge or refund ends when its attempts run out: as the provider says it ended.

An attempt that timed out may have charged. A payment whose attempts have
run out is called failed only after the provider has said, through its
look-up, that it holds no charge for it; a charge it holds is the outcome
(docs/SPECIFICATION.md §4 rule 10).
"""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from pytest_django import Settings

from operations.models import Operation
from operations.tasks import run_operation
from orders.models import Order, Payment
from provider.gateway import ProviderResult, ProviderUnavailable
from provider.models import Attempt, LedgerEntry
from provider.simulator import SimulatedProvider
from tests.support.concurrency import FinishedOperation
from tests.support.http import Api, body_of, payment_body

pytestmark = pytest.mark.django_db(transaction=True)


class ChargesThenMisreadsProvider(SimulatedProvider):
    """Charges, then fails to read the answer: a bug in a gateway, after the provider's effect."""

    def charge(self, **call: Any) -> ProviderResult:
        super().charge(**call)
        raise ValueError("unexpected field 'outcome' in the provider's answer")


class SilentProvider(SimulatedProvider):
    """Answers nothing, not even a look-up: a provider in a complete outage."""

    def charge(self, **call: Any) -> ProviderResult:
        raise ProviderUnavailable("timed out")

    def look_up(self, *, provider_key: str) -> ProviderResult | None:
        raise ProviderUnavailable("timed out")


class RefundsRefusedProvider(SimulatedProvider):
    def refund(self, **call: Any) -> ProviderResult:
        raise ProviderUnavailable("503 Service Unavailable")


class RefundAnswerLostProvider(SimulatedProvider):
    def refund(self, **call: Any) -> ProviderResult:
        super().refund(**call)
        raise ProviderUnavailable("timed out")


def place_order(api: Api, key: str = "order") -> dict[str, Any]:
    created = api.post(
        "/v1/orders",
        {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"},
        key=key,
    )
    order: dict[str, Any] = body_of(created)["order"]
    return order


def pay(api: Api, order: dict[str, Any], method: str, key: str = "pay") -> dict[str, Any]:
    accepted = api.post("/v1/payments", payment_body(order, method), key=key)
    assert accepted.status_code == 202
    body: dict[str, Any] = body_of(accepted)
    return body


def paid_order(api: Api, finished_operation: FinishedOperation) -> dict[str, Any]:
    order = place_order(api)
    finished_operation(pay(api, order, "pm_card_ok")["operationId"])
    return order


def cancel(api: Api, order: dict[str, Any], key: str) -> str:
    """Cancel a paid order; the refund's operation id."""
    return str(body_of(api.post(f"/v1/orders/{order['id']}/cancel", {}, key=key))["operationId"])


def test_a_provider_that_refuses_every_call_fails_the_payment_and_charges_nothing(
    api: Api, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 3
    order = place_order(api)

    accepted = pay(api, order, "pm_card_provider_down")
    operation = finished_operation(accepted["operationId"])

    assert operation.status == Operation.Status.FAILED
    assert operation.attempts == 3
    assert Attempt.objects.get().count == 3  # three charges asked for, none made
    assert not LedgerEntry.objects.exists()
    # A message that arrives after the end (a redelivery, a late copy).
    run_operation.run(operation_id=operation.id)
    assert Operation.objects.get(pk=operation.id).attempts == 3
    assert Attempt.objects.get().count == 3
    polled = body_of(api.get(f"/v1/operations/{operation.id}"))
    assert polled["status"] == "failed"
    assert polled["error"]["error"] == "ProviderUnavailable"
    payment = body_of(api.get(f"/v1/payments/{accepted['paymentId']}"))
    assert (payment["status"], payment["failureCode"]) == ("failed", "provider_unavailable")
    assert body_of(api.get(f"/v1/orders/{order['id']}"))["status"] == "pending"
    # The order can be paid again, under a new key.
    again = pay(api, order, "pm_card_ok", key="pay-again")
    assert finished_operation(again["operationId"]).status == Operation.Status.SUCCEEDED
    assert Order.objects.get().status == Order.Status.PAID


def test_a_timed_out_charge_found_at_the_provider_is_the_outcome_even_on_the_last_attempt(
    api: Api, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    # pm_card_flaky charges on its first call and loses the answer (a
    # timeout): with one attempt allowed, that was the last.
    settings.OPERATION_MAX_ATTEMPTS = 1
    order = place_order(api)

    accepted = pay(api, order, "pm_card_flaky")
    operation = finished_operation(accepted["operationId"])

    assert operation.status == Operation.Status.SUCCEEDED
    assert operation.attempts == 1
    (charge,) = LedgerEntry.objects.all()
    payment = Payment.objects.get()
    assert (payment.status, payment.provider_charge_id) == ("succeeded", charge.charge_id)
    assert Order.objects.get().status == Order.Status.PAID


def test_a_handler_that_fails_after_its_provider_call_leaves_no_charge_on_an_unpaid_order(
    api: Api, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 2
    settings.PAYMENT_GATEWAY = f"{__name__}.ChargesThenMisreadsProvider"
    order = place_order(api)

    accepted = pay(api, order, "pm_card_ok")
    operation = finished_operation(accepted["operationId"])

    # Each attempt charged under the payment's key (one charge) and failed
    # to read the answer; the look-up found the charge.
    assert operation.status == Operation.Status.SUCCEEDED
    assert operation.attempts == 2
    assert Attempt.objects.get().count == 2
    assert LedgerEntry.objects.count() == 1
    assert Payment.objects.get().status == Payment.Status.SUCCEEDED
    assert Order.objects.get().status == Order.Status.PAID


def test_a_payment_the_provider_cannot_say_anything_of_stays_processing(
    api: Api, broker: None, settings: Settings
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 2
    settings.PAYMENT_GATEWAY = f"{__name__}.SilentProvider"
    order = place_order(api)
    accepted = pay(api, order, "pm_card_ok")

    for _ in range(3):  # the budget's attempts, and the end asked for once more
        run_operation.run(operation_id=accepted["operationId"])

    operation = Operation.objects.get()
    assert operation.status == Operation.Status.PROCESSING
    assert operation.attempts == 3
    # Asked again after the longest backoff, not failed while a charge may exist.
    assert operation.republish_at > timezone.now() + timedelta(seconds=60)
    assert Payment.objects.get().status == Payment.Status.PROCESSING


def test_a_refund_the_provider_keeps_refusing_fails_and_the_order_can_be_cancelled_again(
    api: Api, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 2
    order = paid_order(api, finished_operation)
    settings.PAYMENT_GATEWAY = f"{__name__}.RefundsRefusedProvider"

    failed = finished_operation(cancel(api, order, key="cancel"))
    settings.PAYMENT_GATEWAY = "provider.simulator.SimulatedProvider"
    refunded = finished_operation(cancel(api, order, key="cancel-again"))

    assert (failed.status, failed.error_code, failed.attempts) == (
        "failed",
        "ProviderUnavailable",
        2,
    )
    assert refunded.status == Operation.Status.SUCCEEDED
    assert [e.kind for e in LedgerEntry.objects.all()] == ["charge", "refund"]
    assert Order.objects.get().status == Order.Status.CANCELLED


def test_a_refund_whose_answers_were_lost_is_found_at_the_provider(
    api: Api, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 2
    order = paid_order(api, finished_operation)
    settings.PAYMENT_GATEWAY = f"{__name__}.RefundAnswerLostProvider"

    operation = finished_operation(cancel(api, order, key="cancel"))

    assert (operation.status, operation.attempts) == ("succeeded", 2)
    assert [e.kind for e in LedgerEntry.objects.all()] == ["charge", "refund"]
    assert Payment.objects.get().status == Payment.Status.REFUNDED
    assert Order.objects.get().status == Order.Status.CANCELLED
