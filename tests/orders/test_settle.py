"""The operator's way out: ``manage.py operations settle`` for a charge or refund nobody can end.

A payment out of attempts is ended only on the provider's word, through
its look-up (tests/orders/test_payment_endings.py). When the whole provider
is unreachable (``manage.py provider_outage``), the look-up does not answer
either, and the payment waits without end (docs/decisions/0010): counted
at ``/metrics``, listed by ``manage.py operations``, and ended by an
operator who asks the provider once more, or says what its support said.
"""

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from pytest_django import Settings

from events.models import Event
from operations.attempts import claim_operation
from operations.models import Operation
from operations.tasks import run_operation
from orders.models import Order, Payment
from provider.models import LedgerEntry
from tests.orders.test_payment_endings import cancel, paid_order, pay, place_order
from tests.support.concurrency import FinishedOperation
from tests.support.http import Api, body_of
from tests.support.waits import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def outage(action: str) -> None:
    call_command("provider_outage", action, stdout=io.StringIO())


def settle(operation_id: str, *options: str) -> str:
    out = io.StringIO()
    call_command("operations", "settle", operation_id, *options, stdout=out)
    return out.getvalue()


def out_of_attempts(operation_id: str, budget: int) -> Operation:
    """Run the operation's attempts during the outage, and the end asked for once."""
    for _ in range(budget + 1):
        run_operation.run(operation_id=operation_id)
    operation = Operation.objects.get(pk=operation_id)
    assert operation.status == Operation.Status.PROCESSING
    return operation


@pytest.fixture
def unsettled_payment(api: Api, broker: None, settings: Settings) -> dict[str, Any]:
    """A payment out of attempts while the provider is unreachable."""
    settings.OPERATION_MAX_ATTEMPTS = 2
    order = place_order(api)
    outage("start")
    accepted = pay(api, order, "pm_card_ok")
    out_of_attempts(accepted["operationId"], 2)
    return {**accepted, "orderId": order["id"]}


def payment_events() -> list[str]:
    return list(Event.objects.filter(type__startswith="payment.").values_list("type", flat=True))


def test_settling_asks_the_provider_once_more_and_changes_nothing_while_it_cannot_answer(
    unsettled_payment: dict[str, Any],
) -> None:
    before = Operation.objects.get(pk=unsettled_payment["operationId"])

    with pytest.raises(CommandError, match="still cannot say: timed out") as refused:
        settle(unsettled_payment["operationId"])

    assert "--outcome succeeded [--reference ID], or --outcome failed" in str(refused.value)
    after = Operation.objects.get(pk=before.pk)
    assert after.status == Operation.Status.PROCESSING
    assert after.claimed_until is None  # given back: the workers go on asking
    assert after.republish_at > before.republish_at
    assert Payment.objects.get().status == Payment.Status.PROCESSING
    assert payment_events() == []


def test_once_the_provider_answers_settling_ends_the_payment_as_it_says(
    api: Api, unsettled_payment: dict[str, Any]
) -> None:
    outage("end")

    said = settle(unsettled_payment["operationId"])

    assert said.startswith(f"{unsettled_payment['operationId']} payment.charge ended failed")
    assert f"its result: /v1/payments/{unsettled_payment['paymentId']}" in said
    payment = body_of(api.get(f"/v1/payments/{unsettled_payment['paymentId']}"))
    assert (payment["status"], payment["failureCode"]) == ("failed", "provider_unavailable")
    assert Order.objects.get().status == Order.Status.PENDING  # it can be paid again
    assert not LedgerEntry.objects.exists()
    assert payment_events() == ["payment.failed"]
    # Run again (the operator's retry), it reports the end and changes nothing.
    assert "ended failed" in settle(unsettled_payment["operationId"])
    assert payment_events() == ["payment.failed"]


def test_an_operator_who_learned_the_outcome_elsewhere_records_it(
    api: Api, unsettled_payment: dict[str, Any]
) -> None:
    said = settle(
        unsettled_payment["operationId"], "--outcome", "succeeded", "--reference", "ch_support"
    )

    assert "payment.charge ended succeeded" in said
    polled = body_of(api.get(f"/v1/operations/{unsettled_payment['operationId']}"))
    assert polled["status"] == "succeeded"
    payment = Payment.objects.get()
    assert (payment.status, payment.provider_charge_id) == ("succeeded", "ch_support")
    assert Order.objects.get().status == Order.Status.PAID
    assert payment_events() == ["payment.succeeded"]
    # A verdict that contradicts the end is refused; the same one is not.
    with pytest.raises(CommandError, match="ended succeeded already"):
        settle(unsettled_payment["operationId"], "--outcome", "failed")
    assert "ended succeeded" in settle(unsettled_payment["operationId"], "--outcome", "succeeded")


def test_a_refund_is_settled_as_a_charge_is(
    api: Api, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 2
    order = paid_order(api, finished_operation)
    outage("start")
    refund_id = cancel(api, order, key="cancel")
    wait_until(
        lambda: given_up_once(refund_id), what="the refund's two attempts and its first look-up"
    )
    assert Operation.objects.get(pk=refund_id).status == Operation.Status.PROCESSING

    said = settle(refund_id, "--outcome", "succeeded")

    assert f"{refund_id} order.refund ended succeeded" in said
    assert Order.objects.get().status == Order.Status.CANCELLED
    assert Payment.objects.get().status == Payment.Status.REFUNDED


def given_up_once(operation_id: str) -> bool:
    """Its attempts made, and the look-up that would end it asked once, unanswered."""
    operation = Operation.objects.get(pk=operation_id)
    return operation.attempts >= 2 and operation.claimed_until is None


def test_settle_refuses_what_it_must_not_end(
    api: Api, settings: Settings, unsettled_payment: dict[str, Any]
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 5  # the payment now has attempts left

    with pytest.raises(CommandError, match="made 3 of its 5 attempts"):
        settle(unsettled_payment["operationId"])
    with pytest.raises(CommandError, match="No operation op_nothing"):
        settle("op_nothing")
    with pytest.raises(CommandError, match="--reference goes with --outcome succeeded"):
        settle(unsettled_payment["operationId"], "--reference", "ch_x")
    settings.OPERATION_MAX_ATTEMPTS = 2
    # A worker's attempt holds it: the operator's must not run beside it.
    assert claim_operation(unsettled_payment["operationId"]) is not None
    with pytest.raises(CommandError, match="A worker is asking the provider about it right now"):
        settle(unsettled_payment["operationId"], "--outcome", "failed")
    assert Operation.objects.get().status == Operation.Status.PROCESSING


def test_the_operator_sees_what_waits_for_a_settlement(
    unsettled_payment: dict[str, Any], client: Client
) -> None:
    report = io.StringIO()
    call_command("operations", stdout=report)
    metrics = client.get("/metrics").content.decode()

    waiting = report.getvalue().split("Out of attempts, waiting for the provider")[1]
    assert unsettled_payment["operationId"] in waiting
    assert "last failure: ProviderUnavailable" in waiting
    assert 'operations_unsettled{kind="payment.charge"} 1.0' in metrics
    assert 'operations_unsettled{kind="order.refund"} 0.0' in metrics
    assert 'operations_unsettled_oldest_age_seconds{kind="order.refund"} 0.0' in metrics

    outage("end")
    settle(unsettled_payment["operationId"])
    metrics = client.get("/metrics").content.decode()
    assert 'operations_unsettled{kind="payment.charge"} 0.0' in metrics
