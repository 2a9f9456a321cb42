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

from django.db.models import QuerySet

from orders.models import Order


def lock_order(selected: QuerySet[Order]) -> Order | None:
    """The order ``selected`` picks, its row locked until the transaction ends; None if none.

    ``selected`` names one order: by the tenant and its id for a command
    (another tenant's order is then as absent as a missing one), by its
    internal id for a worker. Call it inside a transaction, before anything
    else of the order or its payments is read to decide or written.

    :raises OperationalError: the wait for the lock outlasted the transaction's
        ``lock_timeout``.
    """
    return selected.select_for_update().first()
