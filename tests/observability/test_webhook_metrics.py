"""The webhook metrics the alerts read (deploy/prometheus/rules.yml, docs/RUNBOOK.md).

The web scrape's two gauges, read from the database (events.metrics), on a
state made row by row; and the worker's attempt counter, whose ``outcome``
takes six values whatever a receiver answers.
"""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY

from accounts.models import Tenant
from events.metrics import OUTCOMES, count_attempt
from events.models import Delivery, Event, WebhookEndpoint

pytestmark = pytest.mark.django_db

AGE = "webhook_oldest_pending_delivery_age_seconds"
FAILING = "webhook_endpoints_failing"


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="hooks")


def endpoint(tenant: Tenant, status: str = WebhookEndpoint.Status.ENABLED) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        tenant=tenant,
        url="https://receiver.example/hooks",
        event_types=["*"],
        status=status,
        secret="whsec_test",
    )


def delivery(
    to: WebhookEndpoint, status: str, *, attempts: int = 0, age: timedelta = timedelta()
) -> Delivery:
    """A delivery of an event of its own, created ``age`` ago."""
    event = Event.objects.create(
        tenant=to.tenant,
        type="order.created",
        resource=f"/v1/orders/ord_{Event.objects.count()}",
        txid=Event.objects.count() + 1,
        data={},
    )
    made = Delivery.objects.create(
        tenant=to.tenant, event=event, endpoint=to, status=status, attempts=attempts
    )
    # created_at is auto_now_add: set afterwards.
    Delivery.objects.filter(pk=made.pk).update(created_at=timezone.now() - age)
    return made


def scraped(name: str) -> float:
    """The value of the unlabelled gauge ``name`` at the web node's /metrics."""
    scrape = Client().get("/metrics").content.decode()
    (value,) = [
        float(line.rsplit(" ", 1)[1]) for line in scrape.splitlines() if line.startswith(f"{name} ")
    ]
    return value


def test_with_no_delivery_pending_both_gauges_are_zero(tenant: Tenant) -> None:
    ended = endpoint(tenant)
    delivery(ended, Delivery.Status.SUCCEEDED, attempts=1, age=timedelta(hours=5))
    delivery(ended, Delivery.Status.FAILED, attempts=8, age=timedelta(hours=4))

    age, failing = scraped(AGE), scraped(FAILING)

    assert age == 0
    assert failing == 0


def test_the_age_is_that_of_the_oldest_pending_delivery_and_ended_ones_do_not_count(
    tenant: Tenant,
) -> None:
    down, up = endpoint(tenant), endpoint(tenant)
    delivery(down, Delivery.Status.FAILED, attempts=8, age=timedelta(hours=5))
    delivery(down, Delivery.Status.PENDING, attempts=6, age=timedelta(hours=1, minutes=30))
    delivery(down, Delivery.Status.PENDING, attempts=2, age=timedelta(minutes=4))
    delivery(up, Delivery.Status.SUCCEEDED, attempts=1, age=timedelta(hours=3))
    delivery(up, Delivery.Status.PENDING)

    age = scraped(AGE)

    assert 5400 <= age < 5460


def test_failing_counts_each_enabled_endpoint_with_a_pending_delivery_after_a_failed_attempt(
    tenant: Tenant,
) -> None:
    # Two pending deliveries after failed attempts: one endpoint.
    down = endpoint(tenant)
    delivery(down, Delivery.Status.PENDING, attempts=3, age=timedelta(minutes=20))
    delivery(down, Delivery.Status.PENDING, attempts=1, age=timedelta(minutes=1))
    # A failed attempt, and the delivery still waits for its next one.
    flaky = endpoint(tenant)
    delivery(flaky, Delivery.Status.SUCCEEDED, attempts=1, age=timedelta(minutes=3))
    delivery(flaky, Delivery.Status.PENDING, attempts=1, age=timedelta(minutes=2))
    # Not failing: a pending delivery not attempted yet, and ended ones.
    fresh = endpoint(tenant)
    delivery(fresh, Delivery.Status.PENDING)
    delivery(fresh, Delivery.Status.FAILED, attempts=8, age=timedelta(hours=3))
    delivery(fresh, Delivery.Status.SUCCEEDED, attempts=2, age=timedelta(hours=1))
    # Disabled: not counted, whatever its deliveries (disable_endpoint ends
    # the pending ones; this one holds the query to "enabled").
    disabled = endpoint(tenant, WebhookEndpoint.Status.DISABLED)
    delivery(disabled, Delivery.Status.PENDING, attempts=4, age=timedelta(minutes=30))

    failing = scraped(FAILING)

    assert failing == 2


def attempts() -> dict[str, float]:
    return {
        outcome: REGISTRY.get_sample_value("webhook_delivery_attempts_total", {"outcome": outcome})
        or 0.0
        for outcome in OUTCOMES
    }


@pytest.mark.parametrize(
    ("status_code", "outcome"),
    [
        (204, "2xx"),
        (200, "2xx"),
        (302, "3xx"),
        (404, "4xx"),
        (503, "5xx"),
        (101, "1xx"),
        (None, "error"),
        # Beyond what HTTP allows, still one of the six.
        (99, "1xx"),
        (0, "1xx"),
        (700, "5xx"),
    ],
)
def test_an_attempt_is_counted_under_one_of_six_outcomes(
    status_code: int | None, outcome: str
) -> None:
    before = attempts()

    count_attempt(status_code)

    after = attempts()
    assert after[outcome] == before[outcome] + 1
    assert {name for name in OUTCOMES if after[name] != before[name]} == {outcome}
    assert attempt_series() <= set(OUTCOMES)


def attempt_series() -> set[str]:
    """Every ``outcome`` the counter has a series for."""
    return {
        sample.labels["outcome"]
        for family in REGISTRY.collect()
        if family.name == "webhook_delivery_attempts"
        for sample in family.samples
        if sample.name == "webhook_delivery_attempts_total"
    }


def test_the_outcomes_are_the_six_status_classes_and_error() -> None:
    assert sorted(OUTCOMES) == ["1xx", "2xx", "3xx", "4xx", "5xx", "error"]
