"""Prometheus metrics, served at ``/metrics``.

With several gunicorn workers each process counts on its own; when
``PROMETHEUS_MULTIPROC_DIR`` is set (config/gunicorn.py sets it) the
processes write their samples there and ``/metrics`` adds them up, so a
scrape sees the whole server, whichever worker answers it.
"""

import os
from collections.abc import Iterator

from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

IDEMPOTENCY_OUTCOMES = Counter(
    "idempotency_outcomes_total",
    "Commands by what the idempotency layer did with them.",
    ["command", "outcome"],
)
COMMAND_DURATION = Histogram(
    "command_duration_seconds",
    "Time to answer a command, replays and refusals included.",
    ["command"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
HTTP_REQUESTS = Counter(
    "http_requests_total", "HTTP requests answered.", ["method", "route", "status"]
)
HTTP_DURATION = Histogram(
    "http_request_duration_seconds",
    "Time to answer an HTTP request.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


class OperationsCollector(Collector):
    """Operations by kind and status, read from the database at scrape time.

    Workers run in other processes; the table is where their work shows.
    """

    def describe(self) -> list[GaugeMetricFamily]:
        # Known names, so registering does not query the database.
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from operations.models import Operation

        family = GaugeMetricFamily(
            "operations", "Operations by kind and status.", labels=["kind", "status"]
        )
        counts = {
            (row["kind"], row["status"]): row["n"]
            for row in Operation.objects.values("kind", "status").annotate(n=Count("id"))
        }
        for kind in Operation.Kind.values:
            for status in Operation.Status.values:
                family.add_metric([kind, status], counts.get((kind, status), 0))
        yield family


_OPERATIONS = OperationsCollector()
REGISTRY.register(_OPERATIONS)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition; deployments fence it at the network edge."""
    registry = REGISTRY
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(_OPERATIONS)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
