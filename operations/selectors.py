"""Operation reads: one for a client, scoped to its tenant, and the operator's across tenants."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q, Sum

from accounts.models import Tenant
from operations import registry
from operations.errors import NoSuchOperation
from operations.models import Operation


def get_operation(*, tenant: Tenant, operation_id: str) -> Operation:
    """The tenant's operation, read from our table (never from a result backend).

    Only of a kind a client's command starts (``registry.client_kinds``):
    the service's own work, a webhook delivery, is told by its endpoint's
    deliveries instead.

    :raises NoSuchOperation: no such operation in this tenant.
    """
    operation = Operation.objects.filter(
        tenant=tenant, pk=operation_id, kind__in=registry.client_kinds()
    ).first()
    if operation is None:
        raise NoSuchOperation(f"No operation {operation_id}.")
    return operation


@dataclass(frozen=True)
class Tally:
    """The operations of one kind in one status."""

    kind: str
    status: str
    count: int
    attempts: int
    # Messages published for them: one each, and the copies.
    messages: int


# What an operator reads never scans the ended operations, which pile up
# for OPERATION_RETENTION: the processing ones are read through their
# partial index (operation_processing_age), the ended ones only over a
# recent window, through theirs (operation_ended). Both cost what the work
# under way, or an hour's work, costs, whatever the table holds.
ENDED_WINDOW = timedelta(hours=1)


def tallies(*, now: datetime) -> list[Tally]:
    """Processing operations by kind, and those ended within ``ENDED_WINDOW`` by kind and status.

    With their attempts and messages.
    """
    processing = Operation.objects.filter(status=Operation.Status.PROCESSING)
    ended = Operation.objects.filter(
        status__in=[Operation.Status.SUCCEEDED, Operation.Status.FAILED],
        updated_at__gte=now - ENDED_WINDOW,
    )
    rows = [
        row
        for operations in (processing, ended)
        for row in operations.values("kind", "status")
        .annotate(count=Count("id"), attempts=Sum("attempts"), messages=Sum("publications"))
        .order_by("kind", "status")
    ]
    return [
        Tally(r["kind"], r["status"], r["count"], r["attempts"] or 0, r["messages"] or 0)
        for r in rows
    ]


def processing_counts() -> dict[str, int]:
    """Processing operations by kind: a count over their partial index alone."""
    rows = (
        Operation.objects.filter(status=Operation.Status.PROCESSING)
        .values("kind")
        # count(*), not count(id): the index holds no id, and so the count
        # can be read from the index alone.
        .annotate(n=Count("*"))
        .order_by()
    )
    return {row["kind"]: row["n"] for row in rows}


def oldest_processing() -> dict[str, Operation | None]:
    """The oldest processing operation of each registered kind, or None; an index probe each."""
    processing = Operation.objects.filter(status=Operation.Status.PROCESSING)
    return {
        kind: processing.filter(kind=kind).order_by("created_at").first()
        for kind in registry.kinds()
    }


def most_attempted(limit: int) -> list[Operation]:
    """The processing operations that have used most of their attempts; the oldest first."""
    return list(
        Operation.objects.filter(status=Operation.Status.PROCESSING).order_by(
            "-attempts", "created_at"
        )[:limit]
    )


def _out_of_attempts() -> Q:
    """Processing operations that have used their kind's whole attempt budget.

    Their last attempt failed and their kind could not end them: the
    answer that would (the provider's look-up) does not come. They wait for
    it, asked again every minute, or for an operator (``operations settle``).
    """
    budgets = Q(pk__in=[])  # no kind registered: none
    for kind in registry.registrations():
        budgets |= Q(kind=kind.name, attempts__gte=kind.retry.budget())
    return Q(status=Operation.Status.PROCESSING) & budgets


@dataclass(frozen=True)
class Unsettled:
    """The operations of one kind out of attempts and still processing."""

    count: int
    # When the oldest of them was started.
    oldest: datetime


def unsettled_by_kind() -> dict[str, Unsettled]:
    """Operations out of attempts and still processing, by kind: one query on the partial index."""
    rows = (
        Operation.objects.filter(_out_of_attempts())
        .values("kind")
        .annotate(n=Count("*"), oldest=Min("created_at"))
        .order_by()
    )
    return {row["kind"]: Unsettled(row["n"], row["oldest"]) for row in rows}


def unsettled(limit: int) -> list[Operation]:
    """Up to ``limit`` operations out of attempts and still processing; the oldest first."""
    return list(Operation.objects.filter(_out_of_attempts()).order_by("created_at")[:limit])


def age(operation: Operation, now: datetime) -> float:
    """Seconds since the operation was started."""
    return max(0.0, (now - operation.created_at).total_seconds())
