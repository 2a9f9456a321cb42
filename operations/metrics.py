"""Operations at ``/metrics``, read from the database at scrape time.

- ``operations{kind, status}``: operations by kind and status;
- ``operations_oldest_processing_age_seconds{kind}``: how long the oldest
  operation of each kind still processing has waited, 0 when none is. An
  operator alerts on it: it rises when no worker consumes, when the
  provider keeps refusing, or when a backlog grows.
"""

from collections.abc import Iterator

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from operations import registry
from operations.models import Operation
from operations.selectors import age, oldest_processing


class OperationsCollector(Collector):
    """Operations by kind and status, and the age of the oldest processing ones.

    Workers run in other processes; the table is where their work shows.
    Every registered kind and every status is reported, zeros included, so
    the series exist before the first operation of a kind, and the labels
    are the registered kinds alone.
    """

    def describe(self) -> list[GaugeMetricFamily]:
        # Known names, so registering does not query the database.
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "operations", "Operations by kind and status.", labels=["kind", "status"]
        )
        counts = {
            (row["kind"], row["status"]): row["n"]
            for row in Operation.objects.values("kind", "status").annotate(n=Count("id"))
        }
        for kind in registry.kinds():
            for status in Operation.Status.values:
                family.add_metric([kind, status], counts.get((kind, status), 0))
        yield family
        yield self._oldest_processing()

    @staticmethod
    def _oldest_processing() -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "operations_oldest_processing_age_seconds",
            "Seconds since the oldest operation of each kind still processing was started"
            " (0: none is processing).",
            labels=["kind"],
        )
        now = timezone.now()
        for kind, oldest in oldest_processing().items():
            family.add_metric([kind], 0.0 if oldest is None else age(oldest, now))
        return family
