"""Liveness and readiness probes (no authentication), and readiness at ``/metrics``."""

from collections.abc import Iterator

from celery import current_app
from django.db import connection
from django.http import HttpRequest, JsonResponse
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


def healthz(request: HttpRequest) -> JsonResponse:
    """The process is alive and serving."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """The database and the broker are reachable: this instance can take traffic."""
    checks = {"database": _database_ok(), "broker": _broker_ok()}
    ready = all(checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return False
    return True


def _broker_ok() -> bool:
    try:
        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception:
        return False
    return True


class ReadinessCollector(Collector):
    """``service_ready{check}``: 1 while ``/readyz`` finds the database (or broker) reachable.

    Read at each scrape, so an alert needs no probe of its own; the broker's
    check opens a connection, at most 2 s, once per scrape.
    """

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "service_ready", "1 when the check of /readyz passes, else 0.", labels=["check"]
        )
        family.add_metric(["database"], float(_database_ok()))
        family.add_metric(["broker"], float(_broker_ok()))
        yield family
