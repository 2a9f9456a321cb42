"""Events are kept EVENT_RETENTION, then purged with their deliveries; a pending one is kept."""

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from events.models import Delivery, Event, WebhookEndpoint
from events.retention import purge
from tests.support.http import Api, body_of

pytestmark = pytest.mark.django_db


def aged(days: float) -> None:
    """Make every event so far ``days`` old."""
    Event.objects.update(created_at=timezone.now() - timedelta(days=days))


def test_events_past_the_retention_are_purged_with_their_deliveries(
    api: Api, order_body: dict[str, Any]
) -> None:
    endpoint = api.post(
        "/v1/webhook-endpoints",
        {"url": "https://192.0.32.10/hooks", "eventTypes": ["*"]},
        key="S",
    )
    api.post("/v1/orders", order_body, key="old")
    Delivery.objects.update(status=Delivery.Status.SUCCEEDED)
    aged(31)
    api.post("/v1/orders", order_body, key="new")

    result = purge(batch_size=1)

    assert (result.deleted, result.batches) == (1, 1)
    (kept,) = Event.objects.all()
    assert kept.created_at > timezone.now() - timedelta(days=1)
    assert list(Delivery.objects.values_list("event_id", flat=True)) == [kept.seq]
    assert (
        body_of(api.get(f"/v1/webhook-endpoints/{body_of(endpoint)['id']}/deliveries"))["results"][
            0
        ]["eventId"]
        == kept.id
    )


def test_an_event_within_the_retention_or_with_a_pending_delivery_is_kept(
    api: Api, order_body: dict[str, Any]
) -> None:
    api.post("/v1/orders", order_body, key="recent")
    aged(29)
    api.post(
        "/v1/webhook-endpoints",
        {"url": "https://192.0.32.10/hooks", "eventTypes": ["*"]},
        key="S",
    )
    api.post("/v1/orders", order_body, key="pending")
    Event.objects.filter(deliveries__isnull=False).update(
        created_at=timezone.now() - timedelta(days=40)
    )

    assert purge().deleted == 0
    assert Event.objects.count() == 2


def test_the_command_says_what_it_purged(api: Api, order_body: dict[str, Any]) -> None:
    api.post("/v1/orders", order_body, key="old")
    aged(31)
    out = StringIO()

    call_command("purge_events", stdout=out)

    assert out.getvalue().startswith("Purged 1 events older than 30 days")
    assert not Event.objects.exists()


def test_an_endpoint_disabled_past_the_retention_is_forgotten_once_no_delivery_names_it(
    api: Api, order_body: dict[str, Any]
) -> None:
    def subscribe(key: str) -> str:
        created = api.post(
            "/v1/webhook-endpoints",
            {"url": "https://192.0.32.10/hooks", "eventTypes": ["*"]},
            key=key,
        )
        endpoint_id: str = body_of(created)["id"]
        return endpoint_id

    long_ago, recently, with_delivery = subscribe("a"), subscribe("b"), subscribe("c")
    api.post("/v1/orders", order_body, key="order")
    Delivery.objects.exclude(endpoint=with_delivery).delete()
    Delivery.objects.update(status=Delivery.Status.SUCCEEDED)
    for endpoint_id in (long_ago, recently, with_delivery):
        api.delete(f"/v1/webhook-endpoints/{endpoint_id}", key=f"delete-{endpoint_id}")
    WebhookEndpoint.objects.exclude(pk=recently).update(
        updated_at=timezone.now() - timedelta(days=31)
    )

    result = purge()

    assert result.endpoints == 1
    assert set(WebhookEndpoint.objects.values_list("pk", flat=True)) == {recently, with_delivery}
    assert api.get(f"/v1/webhook-endpoints/{long_ago}").status_code == 404
