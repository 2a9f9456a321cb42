"""``API_THROTTLE_RATE``: a rate limit per principal, shared by every server process.

A fixed window counted in the database (:class:`api.models.RateLimitWindow`):
each request adds one to its client's row for the current window and reads
the new count back, in one statement, so that gunicorn's worker processes
(and several servers on one database) all count against the same limit.
DRF's own throttles keep their counts in Django's cache, which is local
memory in each process unless a shared cache is configured.
"""

import time
from typing import cast

from django.conf import settings
from django.db import connection
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from api.middleware import client_address
from api.models import RateLimitWindow

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """``"100/min"`` → (100 requests, 60 seconds); DRF's format (``s``, ``m``, ``h``, ``d``)."""
    count, period = rate.split("/")
    return int(count), _PERIODS[period.strip()[0]]


def count_hit(ident: str, window_start: int) -> int:
    """Add one request to ``ident``'s window and return the window's count so far.

    One statement, in autocommit: concurrent requests of one client queue on
    its row for the length of the statement, never of a command, and each
    reads back its own count, so exactly the limit gets through. PostgreSQL
    and SQLite (3.35 and later) both speak this upsert.
    """
    table = connection.ops.quote_name(RateLimitWindow._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (ident, window_start, hits) VALUES (%s, %s, 1) "  # noqa: S608 - the table name is ours
            f"ON CONFLICT (ident, window_start) DO UPDATE SET hits = {table}.hits + 1 "
            "RETURNING hits",
            [ident, window_start],
        )
        return int(cursor.fetchone()[0])


def purge_before(window_start: int) -> None:
    """Delete every client's windows that started before ``window_start``."""
    RateLimitWindow.objects.filter(window_start__lt=window_start).delete()


class PrincipalRateThrottle(BaseThrottle):
    """``API_THROTTLE_RATE`` (e.g. ``100/min``) per principal; off when unset.

    settings.py lists this class only when the rate is set, so an API
    without a limit runs no query for it. Requests that need no login (the
    schema) are counted per client address.
    """

    scope = "principal"

    def __init__(self) -> None:
        self.rate = self.get_rate()
        self.retry_after: float | None = None

    def get_rate(self) -> str | None:
        # Read when the throttle is made, not when DRF's settings were first
        # imported, so that the setting is the one in force.
        rates = cast(dict[str, str | None], settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])
        return rates.get(self.scope)

    def allow_request(self, request: Request, view: object) -> bool:
        if self.rate is None:
            return True
        limit, period = parse_rate(self.rate)
        now = time.time()
        window_start = int(now // period) * period
        hits = count_hit(self.ident(request), window_start)
        if hits == 1:
            # This client's first request of a window (so at most once per
            # client and window): clear out everyone's windows older than
            # the previous one. The previous one is kept for servers whose
            # clocks lag, which may still be counting in it.
            purge_before(window_start - period)
        self.retry_after = window_start + period - now
        return hits <= limit

    def wait(self) -> float | None:
        return self.retry_after

    @staticmethod
    def ident(request: Request) -> str:
        principal = request.user
        if principal is None or principal.pk is None:
            return f"address:{client_address(request)}"
        return f"principal:{principal.pk}"
