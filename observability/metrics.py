"""Prometheus metrics, served at ``/metrics``.

With several gunicorn workers each process counts on its own; when
``PROMETHEUS_MULTIPROC_DIR`` is set (config/gunicorn.py sets it, which
gunicorn reads with ``-c`` or, started in the project's directory, through
./gunicorn.conf.py) the processes write their samples there and
``/metrics`` adds them up, so a scrape sees the whole server, whichever
worker answers it. A server started without that configuration (elsewhere
without ``-c``, or another WSGI server with several processes) answers each
scrape with the counts of the one process that serves it.

The directory holds the live workers' files and one archive of the dead
ones' counts (observability/metrics_archive.py, folded by gunicorn's
master): a scrape costs what it cost on the first day, however many
workers were restarted since.
"""

import os
from collections.abc import Iterable

import structlog
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import REGISTRY, Collector

from observability.metrics_archive import ConsistentCollector

logger = structlog.get_logger(__name__)

# From 5 ms (a replay) to 10 s (past every timeout of a command).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HTTP_REQUESTS = Counter(
    "http_requests_total", "HTTP requests answered.", ["method", "route", "status"]
)
HTTP_DURATION = Histogram(
    "http_request_duration_seconds",
    "Time to answer an HTTP request.",
    ["method", "route"],
    buckets=DURATION_BUCKETS,
)


# Collectors that read their numbers at scrape time (the operations table,
# for instance). Registered by the apps that own the numbers, and added to
# the multiprocess registry too, since they are not per-process samples.
_collectors: list[Collector] = []


def register_collector(collector: Collector) -> None:
    """Serve ``collector`` at ``/metrics``, whichever process answers the scrape.

    A collector that reads the database yields nothing while the database
    fails: the scrape still answers, with the counters and
    ``service_ready{check="database"} 0``, which is what an operator needs then.
    """
    collector = _Tolerant(collector)
    REGISTRY.register(collector)
    _collectors.append(collector)


class _Tolerant(Collector):
    def __init__(self, collector: Collector) -> None:
        self._collector = collector

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        try:
            # Whole, so that a failure halfway yields no family half-filled.
            return list(self._collector.collect())
        except DatabaseError:
            logger.warning(
                "metrics not read from the database", collector=type(self._collector).__name__
            )
            return []


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition; deployments fence it at the network edge."""
    registry = REGISTRY
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        # Under the archive's lock: never while the master moves a dead
        # worker's counts into the archive, or they would be seen twice or
        # not at all. Only while reading the files; not while the
        # collectors below query the database.
        ConsistentCollector(registry)
        for collector in _collectors:
            registry.register(collector)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
