"""Payments, refunds and operations, end to end through a real Celery worker."""

import io
import json
import threading
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import IntegrityError, connections, transaction
from django.test import Client
from pytest_django import Settings

from operations.models import Operation
from operations.services import finish_operation
from operations.tasks import run_operation
from orders.handlers import charge_payment
from orders.models import Order, Payment
from provider.gateway import ProviderResult
from provider.models import Attempt, LedgerEntry
from tests.support.concurrency import FinishedOperation, run_concurrently, wait_for_lock_waiters
from tests.support.http import Api, ClientResponse, body_of, payment_body
from tests.support.live import suite_database_url

# Transactional: the provider refuses to be called inside a transaction, as
# a remote call must never be, and a test transaction would wrap it in one.
pytestmark = pytest.mark.django_db(transaction=True)


def ledger() -> list[dict[str, Any]]:
    out = io.StringIO()
    call_command("provider_ledger", stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def place_order(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/v1/orders", body, key=f"order-{Order.objects.count()}")
    assert response.status_code == 201
    order: dict[str, Any] = body_of(response)["order"]
    return order


# --- end to end, with a worker ---------------------------------------------------


def test_a_payment_is_charged_by_the_worker(
    api: Api, order_body: dict[str, Any], worker: None, finished_operation: FinishedOperation
) -> None:
    order = place_order(api, order_body)

    response = api.post("/v1/payments", payment_body(order), key="pay-1")

    assert response.status_code == 202
    answer = body_of(response)
    payment_id, operation_id = answer["paymentId"], answer["operationId"]
    assert answer == {
        "status": "processing",
        "paymentId": payment_id,
        "operationId": operation_id,
        "links": {
            "self": f"/v1/payments/{payment_id}",
            "operation": f"/v1/operations/{operation_id}",
        },
    }
    assert payment_id.startswith("pay_")
    assert operation_id.startswith("op_")
    assert response["Location"] == f"/v1/operations/{operation_id}"
    assert int(response["Retry-After"]) >= 1

    finished_operation(operation_id)
    operation = api.get(f"/v1/operations/{operation_id}")
    payment = body_of(api.get(f"/v1/payments/{payment_id}"))
    paid_order = body_of(api.get(f"/v1/orders/{order['id']}"))

    assert operation.status_code == 200
    assert not operation.has_header("Retry-After")
    assert body_of(operation) | {"createdAt": None, "updatedAt": None} == {
        "id": operation_id,
        "kind": "payment.charge",
        "status": "succeeded",
        "resultId": payment_id,
        "error": None,
        "createdAt": None,
        "updatedAt": None,
        "links": {
            "self": f"/v1/operations/{operation_id}",
            "result": f"/v1/payments/{payment_id}",
        },
    }
    assert payment["status"] == "succeeded"
    assert payment["failureCode"] is None
    assert payment["amount"] == order["totalAmount"]
    assert payment["orderId"] == order["id"]
    assert paid_order["status"] == "paid"
    assert paid_order["payments"] == [payment_id]
    assert [(e["kind"], e["paymentId"], e["amount"]) for e in ledger()] == [
        ("charge", payment_id, order["totalAmount"])
    ]


def test_a_declined_card_fails_the_payment_and_the_order_can_be_paid_again(
    api: Api, order_body: dict[str, Any], worker: None, finished_operation: FinishedOperation
) -> None:
    order = place_order(api, order_body)

    declined = body_of(api.post("/v1/payments", payment_body(order, "pm_card_declined"), key="p1"))
    failed = finished_operation(declined["operationId"])
    retry = body_of(api.post("/v1/payments", payment_body(order), key="p2"))
    finished_operation(retry["operationId"])

    assert failed.status == Operation.Status.FAILED
    operation = body_of(api.get(f"/v1/operations/{declined['operationId']}"))
    assert operation["error"]["error"] == "PaymentDeclined"
    assert "card_declined" in operation["error"]["message"]
    payment = body_of(api.get(f"/v1/payments/{declined['paymentId']}"))
    assert payment["status"] == "failed"
    assert payment["failureCode"] == "card_declined"
    assert Order.objects.get().status == Order.Status.PAID
    assert [e["paymentId"] for e in ledger()] == [declined["paymentId"], retry["paymentId"]]


def test_a_flaky_provider_is_retried_and_charges_once(
    api: Api, order_body: dict[str, Any], worker: None, finished_operation: FinishedOperation
) -> None:
    order = place_order(api, order_body)

    accepted = body_of(api.post("/v1/payments", payment_body(order, "pm_card_flaky"), key="p"))
    operation = finished_operation(accepted["operationId"])

    assert operation.status == Operation.Status.SUCCEEDED
    # A timeout after charging, a 503, then the answer: three calls, one charge.
    assert operation.attempts == 3
    assert Attempt.objects.get().count == 3
    charges = [e for e in ledger() if e["paymentId"] == accepted["paymentId"]]
    assert len(charges) == 1
    assert Payment.objects.get().provider_charge_id == charges[0]["chargeId"]
    assert Order.objects.get().status == Order.Status.PAID


def test_cancelling_a_paid_order_refunds_it(
    api: Api, order_body: dict[str, Any], worker: None, finished_operation: FinishedOperation
) -> None:
    order = place_order(api, order_body)
    paid = body_of(api.post("/v1/payments", payment_body(order), key="p"))
    finished_operation(paid["operationId"])

    response = api.post(f"/v1/orders/{order['id']}/cancel", {"reason": "no longer needed"}, key="c")

    assert response.status_code == 202
    refund = body_of(response)
    assert refund["status"] == "processing"
    assert refund["orderId"] == order["id"]
    assert response["Location"] == f"/v1/operations/{refund['operationId']}"
    finished_operation(refund["operationId"])
    operation = body_of(api.get(f"/v1/operations/{refund['operationId']}"))
    assert operation["kind"] == "order.refund"
    assert operation["status"] == "succeeded"
    assert operation["resultId"] == order["id"]
    assert operation["links"]["result"] == f"/v1/orders/{order['id']}"
    assert body_of(api.get(f"/v1/orders/{order['id']}"))["status"] == "cancelled"
    assert body_of(api.get(f"/v1/payments/{paid['paymentId']}"))["status"] == "refunded"
    assert [e["kind"] for e in ledger()] == ["charge", "refund"]

    replay = api.post(f"/v1/orders/{order['id']}/cancel", {"reason": "no longer needed"}, key="c")
    again = api.post(f"/v1/orders/{order['id']}/cancel", {}, key="c2")

    assert replay.status_code == 202
    assert replay["Idempotent-Replayed"] == "true"
    assert body_of(replay) == {**refund, "status": "succeeded"}
    assert again.status_code == 200
    assert body_of(again)["order"]["status"] == "cancelled"


# --- retries of an asynchronous command ------------------------------------------


def test_a_retry_reports_the_operations_current_status_with_the_same_ids(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = place_order(api, order_body)
    first = api.post("/v1/payments", payment_body(order), key="p")

    while_processing = api.post("/v1/payments", payment_body(order), key="p")
    # Perform the operation here, as the worker would.
    run_operation.run(operation_id=body_of(first)["operationId"])
    after_completion = api.post("/v1/payments", payment_body(order), key="p")

    assert while_processing.status_code == after_completion.status_code == 202
    assert while_processing.content == first.content
    assert while_processing["Idempotent-Replayed"] == "true"
    assert while_processing["Retry-After"] == first["Retry-After"]
    assert body_of(after_completion) == {**body_of(first), "status": "succeeded"}
    assert after_completion["Location"] == first["Location"]
    assert after_completion["Idempotent-Replayed"] == "true"
    assert not after_completion.has_header("Retry-After")
    assert Payment.objects.count() == 1


# --- synchronous validation ------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "status", "error"),
    [
        ({"orderId": "ord_missing"}, 422, "OrderNotFound"),
        ({"amount": 1}, 422, "AmountMismatch"),
        ({"currency": "USD"}, 422, "CurrencyMismatch"),
        ({"amount": "3980"}, 400, "ValidationError"),
        ({"paymentMethod": None}, 400, "ValidationError"),
    ],
)
def test_a_payment_that_does_not_fit_the_order_is_refused(
    api: Api, order_body: dict[str, Any], change: dict[str, Any], status: int, error: str
) -> None:
    order = place_order(api, order_body)

    response = api.post("/v1/payments", payment_body(order, **change), key="p")

    assert response.status_code == status
    assert body_of(response)["error"] == error
    assert Payment.objects.count() == 0
    assert Operation.objects.count() == 0


@pytest.mark.parametrize("method", ["pm_bogus", "PM_CARD_OK", "pm_card_ok ", "", 1])
def test_a_method_the_provider_does_not_have_is_refused_stored_and_never_charged(
    api: Api, order_body: dict[str, Any], method: Any
) -> None:
    order = place_order(api, order_body)
    calls_before = list(Attempt.objects.values_list("provider_key", "count"))

    refused = api.post("/v1/payments", payment_body(order, method), key="bogus")
    replayed = api.post("/v1/payments", payment_body(order, method), key="bogus")

    assert refused.status_code == 400
    problem = body_of(refused)
    assert problem["error"] == "ValidationError"
    assert list(problem["details"]) == ["paymentMethod"]
    # It tells the client what it may send instead.
    assert "pm_card_ok, pm_card_declined, pm_card_flaky" in problem["details"]["paymentMethod"][0]
    # A final answer: stored with the key and replayed byte for byte.
    assert replayed.status_code == 400
    assert replayed.content == refused.content
    assert replayed["Content-Type"] == refused["Content-Type"] == "application/problem+json"
    assert replayed["Idempotent-Replayed"] == "true"
    assert not refused.has_header("Idempotent-Replayed")
    # No payment, nothing to charge, and the provider never heard of it.
    assert Payment.objects.count() == 0
    assert Operation.objects.count() == 0
    assert not LedgerEntry.objects.exists()
    assert list(Attempt.objects.values_list("provider_key", "count")) == calls_before


class GiftCardProvider:
    """A provider with methods of its own, configured through ``PAYMENT_GATEWAY``."""

    payment_methods = {"pm_gift_card": "Paid from a gift card."}

    def charge(self, **call: Any) -> ProviderResult:
        return ProviderResult(charge_id="ch_gift", succeeded=True)

    def refund(self, **call: Any) -> ProviderResult:
        return ProviderResult(charge_id="re_gift", succeeded=True)


def test_the_configured_providers_methods_are_the_ones_accepted_and_documented(
    api: Api, order_body: dict[str, Any], settings: Settings
) -> None:
    settings.PAYMENT_GATEWAY = f"{__name__}.GiftCardProvider"
    order = place_order(api, order_body)

    simulator_card = api.post("/v1/payments", payment_body(order, "pm_card_ok"), key="card")
    gift_card = api.post("/v1/payments", payment_body(order, "pm_gift_card"), key="gift")
    schema = Client().get("/v1/schema/", {"format": "json"}).json()

    assert simulator_card.status_code == 400
    assert gift_card.status_code == 202
    assert schema["components"]["schemas"]["PaymentMethodEnum"]["enum"] == ["pm_gift_card"]


def test_another_tenants_order_cannot_be_paid(
    api: Api, stranger_api: Api, order_body: dict[str, Any]
) -> None:
    order = place_order(api, order_body)

    response = stranger_api.post("/v1/payments", payment_body(order), key="p")

    assert response.status_code == 422
    assert body_of(response)["error"] == "OrderNotFound"
    assert Payment.objects.count() == 0


def test_the_state_of_the_order_can_refuse_a_payment(api: Api, order_body: dict[str, Any]) -> None:
    processing = place_order(api, order_body)
    paid = place_order(api, order_body)
    cancelled = place_order(api, order_body)
    api.post("/v1/payments", payment_body(processing), key="first")
    paying = body_of(api.post("/v1/payments", payment_body(paid), key="paid"))
    run_operation.run(operation_id=paying["operationId"])
    api.post(f"/v1/orders/{cancelled['id']}/cancel", {}, key="cancel")

    in_progress = api.post("/v1/payments", payment_body(processing), key="second")
    already_paid = api.post("/v1/payments", payment_body(paid), key="paid-again")
    was_cancelled = api.post("/v1/payments", payment_body(cancelled), key="cancelled")
    cancel_while_paying = api.post(f"/v1/orders/{processing['id']}/cancel", {}, key="c2")
    replayed = api.post("/v1/payments", payment_body(processing), key="second")

    assert (in_progress.status_code, body_of(in_progress)["error"]) == (409, "PaymentInProgress")
    assert (already_paid.status_code, body_of(already_paid)["error"]) == (409, "OrderAlreadyPaid")
    assert body_of(was_cancelled)["error"] == "OrderStateConflict"
    assert body_of(cancel_while_paying)["error"] == "OrderStateConflict"
    assert replayed.content == in_progress.content
    assert replayed["Idempotent-Replayed"] == "true"
    assert Payment.objects.count() == 2


def test_the_database_refuses_a_second_live_payment_of_one_order(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = Order.objects.get(id=place_order(api, order_body)["id"])
    fields = {"tenant": order.tenant, "order": order, "amount": 1, "currency": "RUB"}
    Payment.objects.create(payment_method="pm_card_ok", **fields)

    with pytest.raises(IntegrityError), transaction.atomic():
        Payment.objects.create(payment_method="pm_card_ok", **fields)


# --- exactly one charge ----------------------------------------------------------


def test_a_storm_of_payments_for_one_order_charges_once(
    api: Api, order_body: dict[str, Any], worker: None, finished_operation: FinishedOperation
) -> None:
    order = place_order(api, order_body)

    def pay(i: int) -> tuple[str, ClientResponse]:
        key = "storm" if i < 32 else f"other-{i}"
        return key, api.post("/v1/payments", payment_body(order), key=key)

    responses = run_concurrently(40, pay)

    # Whichever key won, every copy of the one key got the same answer...
    same_key = [r for key, r in responses if key == "storm"]
    assert len({(r.status_code, r.content) for r in same_key}) == 1
    # ...and exactly one key started a payment; the others were refused.
    accepted = [r for _, r in responses if r.status_code == 202]
    assert len({body_of(r)["paymentId"] for r in accepted}) == 1
    refused = [r for _, r in responses if r.status_code != 202]
    assert {(r.status_code, body_of(r)["error"]) for r in refused} <= {
        (409, "PaymentInProgress"),
        (409, "OrderAlreadyPaid"),
    }
    finished_operation(body_of(accepted[0])["operationId"])
    assert len(ledger()) == 1
    assert Payment.objects.filter(status=Payment.Status.SUCCEEDED).count() == 1
    assert Payment.objects.count() == 1


def test_a_redelivered_task_charges_once(api: Api, order_body: dict[str, Any]) -> None:
    order = place_order(api, order_body)
    operation_id = body_of(api.post("/v1/payments", payment_body(order), key="p"))["operationId"]

    run_operation.run(operation_id=operation_id)
    run_operation.run(operation_id=operation_id)

    assert Operation.objects.get().status == Operation.Status.SUCCEEDED
    assert len(ledger()) == 1


def test_concurrent_deliveries_of_one_task_charge_once(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = place_order(api, order_body)
    operation_id = body_of(api.post("/v1/payments", payment_body(order), key="p"))["operationId"]

    run_concurrently(8, lambda i: run_operation.run(operation_id=operation_id))

    operation = Operation.objects.get()
    assert operation.status == Operation.Status.SUCCEEDED
    assert operation.attempts == 1
    assert len(ledger()) == 1


# --- forward-only status ----------------------------------------------------------


def test_a_late_result_cannot_move_a_finished_operation_back(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = place_order(api, order_body)
    operation_id = body_of(api.post("/v1/payments", payment_body(order), key="p"))["operationId"]
    slow_attempt = Operation.objects.get(pk=operation_id)
    run_operation.run(operation_id=operation_id)  # another attempt finishes first

    moved_back = finish_operation(slow_attempt, succeeded=False, error_code="Late")
    charge_payment(slow_attempt)  # the slow attempt reaching the end of its work

    assert moved_back is False
    operation = Operation.objects.get()
    assert operation.status == Operation.Status.SUCCEEDED
    assert operation.error_code == ""
    assert Payment.objects.get().status == Payment.Status.SUCCEEDED
    assert len(ledger()) == 1


def test_a_finishing_charge_waits_for_the_order_before_touching_the_payment(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = place_order(api, order_body)
    accepted = body_of(api.post("/v1/payments", payment_body(order), key="p"))

    def perform() -> None:
        try:
            run_operation.run(operation_id=accepted["operationId"])
        finally:
            connections.close_all()

    worker = threading.Thread(target=perform)

    with psycopg.connect(suite_database_url()) as command:
        # A command holding the order, as a new payment or a cancel does.
        command.execute("SELECT 1 FROM orders_order WHERE id = %s FOR UPDATE", [order["id"]])
        worker.start()
        wait_for_lock_waiters()
        # The worker waits on the order, not holding the payment: the
        # command could insert a payment without waiting for the worker.
        with psycopg.connect(suite_database_url()) as probe:
            probe.execute(
                "SELECT 1 FROM orders_payment WHERE id = %s FOR UPDATE NOWAIT",
                [accepted["paymentId"]],
            )
    worker.join(timeout=30)

    assert Operation.objects.get().status == Operation.Status.SUCCEEDED
    assert Order.objects.get().status == Order.Status.PAID
