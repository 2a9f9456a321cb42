"""Webhook deliveries at ``/metrics``.

Read from the database at scrape time, by the web nodes:

- ``webhook_oldest_pending_delivery_age_seconds``: how long the oldest
  delivery still pending has waited since its event (0: none is). It
  rises when a receiver is down (each of its deliveries waits out its
  backoff), and when no worker delivers. An index probe;
- ``webhook_endpoints_failing``: enabled endpoints with a pending delivery
  that has failed an attempt (a receiver that answers errors, times out or
  cannot be reached). It falls as those deliveries succeed or end, so it
  lags a recovered receiver by up to its deliveries' backoff. It reads
  every enabled endpoint and their pending deliveries: bounded by what is
  pending, not by history.

- ``events_feed_lag_seconds``: how far the feed lags behind the events
  already committed: the age of the first committed event it does not show
  yet, 0 when it shows them all. The feed shows an event only once every
  older transaction on the PostgreSQL server has ended
  (events.selectors.feed_of), so a transaction left open anywhere on the
  server (another database's too) holds back every event committed after
  it began. An index probe.

Counted by the workers, at a worker's own metrics
(observability/worker_metrics.py):

- ``webhook_deliveries_total{result}``: deliveries ended, ``succeeded`` or
  ``failed`` (their attempts ran out);
- ``webhook_delivery_attempts_total{outcome}``: attempts by what they got,
  ``2xx`` … ``5xx``, or ``error`` when no answer came (a timeout, a refused
  connection, an address refused): a label from six values, whatever a
  receiver answers.
"""

from collections.abc import Iterator

from django.db.models import Exists, OuterRef
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from events.models import Delivery, WebhookEndpoint
from events.selectors import first_unshown_event_at

RESULTS = ("succeeded", "failed")
OUTCOMES = ("2xx", "3xx", "4xx", "5xx", "1xx", "error")

DELIVERIES = Counter("webhook_deliveries_total", "Webhook deliveries ended.", ["result"])
ATTEMPTS = Counter(
    "webhook_delivery_attempts_total", "Webhook delivery attempts, by outcome.", ["outcome"]
)


def count_delivery(result: str) -> None:
    DELIVERIES.labels(result).inc()


def count_attempt(status_code: int | None) -> None:
    outcome = "error" if status_code is None else f"{min(max(status_code // 100, 1), 5)}xx"
    ATTEMPTS.labels(outcome).inc()


def initialise_series() -> None:
    """Every series at 0 (observability.worker_metrics.register_series)."""
    for result in RESULTS:
        DELIVERIES.labels(result)
    for outcome in OUTCOMES:
        ATTEMPTS.labels(outcome)


class DeliveriesCollector(Collector):
    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        oldest = (
            Delivery.objects.filter(status=Delivery.Status.PENDING)
            .order_by("created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        age = GaugeMetricFamily(
            "webhook_oldest_pending_delivery_age_seconds",
            "Seconds since the oldest webhook delivery still pending was created (0: none is).",
        )
        age.add_metric([], 0.0 if oldest is None else (timezone.now() - oldest).total_seconds())
        yield age
        failing = GaugeMetricFamily(
            "webhook_endpoints_failing",
            "Enabled webhook endpoints with a pending delivery whose last attempt failed.",
        )
        failing.add_metric([], float(failing_endpoints()))
        yield failing


def failing_endpoints() -> int:
    """Enabled endpoints with a pending delivery that has failed an attempt."""
    failed_attempt = Delivery.objects.filter(
        endpoint=OuterRef("pk"), status=Delivery.Status.PENDING, attempts__gt=0
    )
    return (
        WebhookEndpoint.objects.filter(status=WebhookEndpoint.Status.ENABLED)
        .filter(Exists(failed_attempt))
        .count()
    )


class FeedCollector(Collector):
    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "events_feed_lag_seconds",
            "Seconds since the first committed event GET /v1/events does not show yet was"
            " written (0: it shows every committed event).",
        )
        lag.add_metric([], feed_lag())
        yield lag


def feed_lag() -> float:
    """Seconds the feed's visible horizon lags behind the committed events (0: none)."""
    first = first_unshown_event_at()
    return 0.0 if first is None else max(0.0, (timezone.now() - first).total_seconds())
