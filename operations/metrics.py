"""Operations at ``/metrics``.

Read from the database at scrape time, by the web nodes:

- ``operations{kind, status}``: the operations the table holds, by kind
  and status. The ended ones pile up for ``OPERATION_RETENTION`` (30 days,
  millions of rows), and counting them made every scrape read them all:
  the processing ones are counted through their partial index, and the
  ended ones are a count kept as they end and as they are purged
  (operations.ended), so a scrape costs the same at 10^3 and 10^6 ended
  operations (tests/operations/test_operator_cost.py,
  ``python -m tests.bench.operations``). How many end per second is
  ``operations_ended_total{kind, status}`` below;
- ``operations_oldest_processing_age_seconds{kind}``: how long the oldest
  operation of each kind still processing has waited, 0 when none is. An
  operator alerts on it: it rises when no worker consumes, when the
  provider keeps refusing, or when a backlog grows;
- ``operations_unsettled{kind}`` and
  ``operations_unsettled_oldest_age_seconds{kind}``: operations that have
  used all their attempts and are still processing, because what would end
  them (the provider's look-up of a charge or refund whose outcome is
  unknown) does not answer; and how long since the oldest was started. They
  wait without end (docs/decisions/0010) until the provider answers or an
  operator settles them (``manage.py operations settle``): an operator
  alerts on the age (``OperationsUnsettled``, after an hour).

Counted by the workers as operations end, at a worker's own metrics
(observability/worker_metrics.py):

- ``operations_ended_total{kind, status}`` and ``operation_attempts{kind, status}``,
  the attempts each took;
- ``operations_attempts_exhausted_total{kind, error}``: ended ``failed``
  because their attempt budget ran out (``OPERATION_MAX_ATTEMPTS``), with
  the kind's retry error (the provider kept refusing) or ``InternalError``.
"""

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from operations import registry
from operations.ended import ended_counts
from operations.models import Operation
from operations.registry import INTERNAL_ERROR
from operations.selectors import age, oldest_processing, processing_counts, unsettled_by_kind


class OperationsCollector(Collector):
    """Operations by kind and status, and the age of the oldest processing one of each kind.

    Workers run in other processes; the table is where their work shows.
    Every registered kind and every status is reported, zeros included, so the series exist
    before the first operation of a kind, and the labels are the registered
    kinds alone.
    """

    def describe(self) -> list[GaugeMetricFamily]:
        # Known names, so registering does not query the database.
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "operations",
            "Operations by kind and status, as the table holds them.",
            labels=["kind", "status"],
        )
        processing = processing_counts()
        ended = ended_counts()
        for kind in registry.kinds():
            family.add_metric([kind, Operation.Status.PROCESSING], processing.get(kind, 0))
            for status in (Operation.Status.SUCCEEDED, Operation.Status.FAILED):
                family.add_metric([kind, status], ended.get((kind, status), 0))
        yield family
        yield self._oldest_processing()
        yield from self._unsettled()

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

    @staticmethod
    def _unsettled() -> Iterator[GaugeMetricFamily]:
        count = GaugeMetricFamily(
            "operations_unsettled",
            "Operations out of attempts and still processing: what would end them (the"
            " provider's look-up) does not answer.",
            labels=["kind"],
        )
        oldest = GaugeMetricFamily(
            "operations_unsettled_oldest_age_seconds",
            "Seconds since the oldest operation of each kind out of attempts and still"
            " processing was started (0: none is).",
            labels=["kind"],
        )
        now = timezone.now()
        waiting = unsettled_by_kind()
        for kind in registry.kinds():
            found = waiting.get(kind)
            count.add_metric([kind], 0 if found is None else found.count)
            oldest.add_metric(
                [kind], 0.0 if found is None else max(0.0, (now - found.oldest).total_seconds())
            )
        yield count
        yield oldest


OPERATIONS_ENDED = Counter(
    "operations_ended_total", "Operations that reached a final status.", ["kind", "status"]
)
# One bucket per attempt up to the default budget of ten, then coarser.
OPERATION_ATTEMPTS = Histogram(
    "operation_attempts",
    "Attempts an operation took, counted when it ended.",
    ["kind", "status"],
    buckets=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 50),
)
OPERATIONS_EXHAUSTED = Counter(
    "operations_attempts_exhausted_total",
    "Operations ended failed because their attempt budget ran out.",
    ["kind", "error"],
)


def count_ended(operation: Operation, status: str, error_code: str) -> None:
    """Count an operation that has just ended (once its transaction committed)."""
    OPERATIONS_ENDED.labels(operation.kind, status).inc()
    OPERATION_ATTEMPTS.labels(operation.kind, status).observe(operation.attempts)
    # Only an exhausted budget ends an operation with these codes
    # (operations.attempts); a provider's refusal has its own.
    if status == Operation.Status.FAILED and error_code in (
        registry.kind_of(operation).retry.error,
        INTERNAL_ERROR,
    ):
        OPERATIONS_EXHAUSTED.labels(operation.kind, error_code).inc()


def initialise_series() -> None:
    """Every series at 0 (observability.worker_metrics.register_series)."""
    for kind in registry.registrations():
        for status in (Operation.Status.SUCCEEDED, Operation.Status.FAILED):
            OPERATIONS_ENDED.labels(kind.name, status)
            OPERATION_ATTEMPTS.labels(kind.name, status)
        for error in (kind.retry.error, INTERNAL_ERROR):
            OPERATIONS_EXHAUSTED.labels(kind.name, error)
