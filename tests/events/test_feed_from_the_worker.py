"""The events a worker's charge and refund record: once each, however often the task runs."""

from typing import Any

import pytest

from events.models import Event
from operations.tasks import run_operation
from tests.support.concurrency import FinishedOperation
from tests.support.http import Api, body_of, payment_body

pytestmark = pytest.mark.django_db(transaction=True)


def place(api: Api) -> dict[str, Any]:
    body = {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
    order: dict[str, Any] = body_of(api.post("/v1/orders", body, key="order"))["order"]
    return order


def pay(api: Api, order: dict[str, Any], method: str, finished: FinishedOperation) -> str:
    accepted = body_of(api.post("/v1/payments", payment_body(order, method), key=method))
    finished(accepted["operationId"])
    # A redelivery of the finished operation's message changes nothing.
    run_operation.run(operation_id=accepted["operationId"])
    return str(accepted["paymentId"])


def feed(api: Api) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = body_of(api.get("/v1/events"))["results"]
    return results


def test_a_charge_records_payment_succeeded_once_with_the_payment_as_read(
    api: Api, worker: None, finished_operation: FinishedOperation
) -> None:
    order = place(api)
    payment_id = pay(api, order, "pm_card_ok", finished_operation)

    assert [e["type"] for e in feed(api)] == ["order.created", "payment.succeeded"]
    succeeded = feed(api)[1]
    assert succeeded["data"] == body_of(api.get(f"/v1/payments/{payment_id}"))
    assert succeeded["links"]["resource"] == f"/v1/payments/{payment_id}"


def test_a_declined_charge_records_payment_failed_once(
    api: Api, worker: None, finished_operation: FinishedOperation
) -> None:
    order = place(api)
    payment_id = pay(api, order, "pm_card_declined", finished_operation)

    failed = feed(api)[-1]
    assert failed["type"] == "payment.failed"
    assert failed["data"]["failureCode"] == "card_declined"
    assert failed["data"] == body_of(api.get(f"/v1/payments/{payment_id}"))


def test_a_refund_records_payment_refunded_and_order_cancelled_once_each(
    api: Api, worker: None, finished_operation: FinishedOperation
) -> None:
    order = place(api)
    payment_id = pay(api, order, "pm_card_ok", finished_operation)
    cancel = f"/v1/orders/{order['id']}/cancel"
    refund = body_of(api.post(cancel, {}, key="cancel"))["operationId"]
    finished_operation(refund)
    run_operation.run(operation_id=refund)
    # Cancelling the cancelled order again, under a new key.
    assert api.post(cancel, {}, key="cancel-again").status_code == 200

    assert [e["type"] for e in feed(api)] == [
        "order.created",
        "payment.succeeded",
        "payment.refunded",
        "order.cancelled",
    ]
    refunded, cancelled = feed(api)[2:]
    assert refunded["data"] == body_of(api.get(f"/v1/payments/{payment_id}"))
    assert cancelled["data"] == body_of(api.get(f"/v1/orders/{order['id']}"))
    assert cancelled["data"]["status"] == "cancelled"
    assert Event.objects.count() == 4
