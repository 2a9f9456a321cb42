"""``Retry-After`` of a processing operation grows with its age (docs/SPECIFICATION.md §4 rule 8).

A client asks every second while an operation is young, and ever less often
while it waits on something slow, never less than every 30 seconds.
"""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django import Settings

from operations.models import Operation
from operations.polling import RULE, retry_after_seconds
from orders.handlers import charge_payment
from provider.gateway import ProviderResult
from tests.support.http import ORDER, Api, body_of, payment_body


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (-5, 1),
        (0, 1),
        (9.9, 1),
        (10, 1),
        (15, 1),
        (19.9, 1),
        (20, 2),
        (59, 5),
        (120, 12),
        (299, 29),
        (300, 30),
        (3600, 30),
        (10**6, 30),
    ],
)
def test_retry_after_is_1_for_10_seconds_then_a_tenth_of_the_age_up_to_30(
    age: float, expected: int
) -> None:
    assert retry_after_seconds(age) == expected


@pytest.mark.django_db
def test_the_specification_and_the_schema_state_the_rule_as_the_code_does() -> None:
    specification = (Path(__file__).resolve().parents[2] / "docs" / "SPECIFICATION.md").read_text()
    schema = Client().get("/v1/schema/", {"format": "json"}).json()

    assert RULE in specification
    assert RULE in schema["paths"]["/v1/operations/{operationId}"]["get"]["description"]


class AcceptingProvider:
    """The provider, at the edge of the world: it charges and refunds at once."""

    payment_methods = {"pm_card_ok": "Always accepted."}

    def charge(self, **call: Any) -> ProviderResult:
        return ProviderResult(charge_id="ch_1", succeeded=True)

    def refund(self, **call: Any) -> ProviderResult:
        return ProviderResult(charge_id="re_1", succeeded=True)


def created_ago(operation_id: str, age: timedelta) -> None:
    Operation.objects.filter(pk=operation_id).update(created_at=timezone.now() - age)


@pytest.mark.django_db
def test_an_old_processing_payment_is_polled_less_often(api: Api) -> None:
    order = body_of(api.post("/v1/orders", ORDER, key="o"))["order"]
    accepted = api.post("/v1/payments", payment_body(order), key="p")
    operation_id = body_of(accepted)["operationId"]
    young = api.get(f"/v1/operations/{operation_id}")

    created_ago(operation_id, timedelta(minutes=2))
    two_minutes = api.get(f"/v1/operations/{operation_id}")
    replayed = api.post("/v1/payments", payment_body(order), key="p")
    created_ago(operation_id, timedelta(days=1))
    a_day = api.get(f"/v1/operations/{operation_id}")
    not_modified = api.get(f"/v1/operations/{operation_id}", **{"If-None-Match": a_day["ETag"]})

    assert accepted.status_code == 202
    assert (accepted["Retry-After"], young["Retry-After"]) == ("1", "1")
    assert body_of(two_minutes)["status"] == "processing"
    assert two_minutes["Retry-After"] == "12"
    assert replayed.status_code == 202
    assert replayed["Idempotent-Replayed"] == "true"
    assert replayed["Retry-After"] == "12"
    assert a_day["Retry-After"] == "30"
    assert not_modified.status_code == 304
    assert not_modified["Retry-After"] == "30"


@pytest.mark.django_db
def test_an_old_processing_refund_is_polled_less_often(api: Api, settings: Settings) -> None:
    settings.PAYMENT_GATEWAY = f"{__name__}.AcceptingProvider"
    order = body_of(api.post("/v1/orders", ORDER, key="o"))["order"]
    paid = body_of(api.post("/v1/payments", payment_body(order), key="p"))
    charge_payment(Operation.objects.get(pk=paid["operationId"]))
    cancel = f"/v1/orders/{order['id']}/cancel"
    accepted = api.post(cancel, {"reason": "no longer needed"}, key="c")
    refund_id = body_of(accepted)["operationId"]

    created_ago(refund_id, timedelta(seconds=59))
    replayed = api.post(cancel, {"reason": "no longer needed"}, key="c")
    polled = api.get(f"/v1/operations/{refund_id}")

    assert accepted.status_code == 202
    assert accepted["Retry-After"] == "1"
    assert body_of(polled)["kind"] == "order.refund"
    assert replayed["Idempotent-Replayed"] == "true"
    assert replayed["Retry-After"] == polled["Retry-After"] == "5"
