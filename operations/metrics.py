"""The ``operations`` gauge: operations by kind and status, read at scrape time."""

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from operations import registry
from operations.models import Operation


class OperationsCollector(Collector):
    """Operations by kind and status, read from the database at scrape time.

    Workers run in other processes; the table is where their work shows.
    Every registered kind and every status is reported, zeros included, so
    the series exist before the first operation of a kind.
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
