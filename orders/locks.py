"""The one lock of an order: its row, so that writers of one order take turns.

A payment, a cancel and a worker's update of one order (recording a
charge or a refund) each lock the order's row first, before they read it
to decide or write it or its payments, and hold it until their
transaction ends: they take turns in one order, so each sees the outcome
of the one before.

The order before its payments, always. A worker recording a charge locks
the order before it updates the payment: a command holding the order's
lock may be inserting a payment, which waits on that payment's row in
``payment_one_live_per_order``; were the payment updated before the order
is locked, each would wait for the other (a deadlock, and a 500).

A command's wait for the lock is bounded by its transaction's
``lock_timeout`` (``IDEMPOTENCY_WAIT``, which the idempotency layer sets
on PostgreSQL): past it the command answers a retryable 503.
"""

from typing import Any

from api.plain_reads import Selected
from orders.models import Order

# The lock is taken on every payment, cancel and charge: as a plain SELECT
# … FOR UPDATE written once (api/plain_reads.py), not a queryset compiled
# on every call.
_ORDER = Selected.of(Order, "o")


def lock_order(**lookup: Any) -> Order | None:
    """The order ``lookup`` names, its row locked until the transaction ends; None if none.

    ``lookup`` names one order by its fields: by the tenant and its id for
    a command (``tenant=…, id=…``: another tenant's order is then as absent
    as a missing one), by its internal id for a worker. Call it inside a
    transaction, before anything else of the order or its payments is read
    to decide or written. ``Order.objects.filter(**lookup).select_for_update().first()``.

    :raises OperationalError: the wait for the lock outlasted the transaction's
        ``lock_timeout``.
    """
    found = _ORDER.where(lock=True, **lookup)
    return found[0] if found else None
