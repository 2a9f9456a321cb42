"""The consumer's inbox: each webhook event handled once, though it arrives more than once.

A delivery whose ``2xx`` was lost is delivered again, and two deliveries of
one event may even arrive at once (the first attempt outlived the
producer's timeout). Verified first (order_service_client.webhooks), an
event is handed to an :class:`Inbox`, which runs the application's handler
once per ``webhook-id``:

- the id is marked done only when the handler returns: a handler that
  raises, or a process that dies inside it, leaves the id to the next
  delivery, which runs the handler again;
- a second delivery while the first is being handled runs nothing and
  raises :class:`DeliveryInProgress`; the receiver answers it with a
  non-``2xx`` (``409``), and the producer delivers it again later, when it
  is either done (``2xx`` at once) or, if the first handler failed, free
  to run. Waiting instead would hold a connection open for as long as the
  other handler runs, past the producer's timeout;
- done ids are kept for ``retention`` (:data:`DEFAULT_INBOX_RETENTION`, 30
  days) and purged as the inbox is used, so its size is bounded by one
  retention period's events.

:class:`MemoryInbox` keeps the ids for the life of the process;
:class:`SQLiteInbox` in a file that threads and processes share and that
survives a restart, with a lease on each claim so that a process killed
mid-handler blocks its id only until the lease lapses.

**Once, not exactly once.** The inbox marks an id done after the handler
returns, in a transaction of its own. A process that dies between the two,
or a handler that outlives its lease, runs the handler a second time. A
handler whose effect lands in the application's own database can close
that gap by recording the id in the same transaction as the effect (an
inbox on that database: :class:`Inbox` is a protocol); otherwise make the
effect itself safe to repeat.
"""

import logging
import os
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from order_service_client._sqlite import check_positive, immediate_transaction, require_file
from order_service_client.errors import OrderServiceError

__all__ = [
    "DEFAULT_INBOX_LEASE",
    "DEFAULT_INBOX_RETENTION",
    "DeliveryInProgress",
    "Inbox",
    "MemoryInbox",
    "SQLiteInbox",
]

# The service keeps events for at least 30 days (GET /v1/events), and its
# retries of a delivery (WEBHOOK_MAX_ATTEMPTS attempts, doubling backoff) end
# long before that: an id purged after 30 days is not delivered again.
DEFAULT_INBOX_RETENTION = 30 * 24 * 60 * 60.0

# How long a SQLiteInbox claim holds an id against other deliveries. A
# receiver must answer within the producer's WEBHOOK_TIMEOUT (10 s by
# default) for the delivery to count, so a handler takes seconds at most:
# three times that covers it. Short, because a process killed mid-handler
# blocks the id (every delivery of it answered "in progress") until its
# claim lapses, and the producer's retries are finite.
DEFAULT_INBOX_LEASE = 30.0

_log = logging.getLogger(__name__)


class DeliveryInProgress(OrderServiceError):
    """Another delivery of this event is being handled now: answer this one with a non-``2xx``.

    Nothing ran. The producer delivers the event again later; by then the
    other delivery has either finished (the id is done) or failed (the id
    is free, and that delivery runs the handler).

    :ivar event_id: the event's ``webhook-id``.
    """

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id} is being handled by another delivery")
        self.event_id = event_id


def _check_event_id(event_id: str) -> None:
    if not event_id:
        raise ValueError("an event id is needed (the delivery's webhook-id)")


@runtime_checkable
class Inbox(Protocol):
    """Runs a handler once per event id, however often the event is delivered."""

    def handle(self, event_id: str, handler: Callable[[], object]) -> bool:
        """Run ``handler`` unless the id is done; mark it done if the handler returns.

        :returns: ``True`` if the handler ran and returned now, ``False`` if
            the id was done already (a redelivery: answer it ``2xx``).
        :raises DeliveryInProgress: another delivery of the id is running it.
        :raises: whatever the handler raised; the id is then not done.
        """
        ...


class MemoryInbox:
    """An inbox in this process's memory, safe to share between threads.

    A restart forgets every id, and a redelivery after it runs the handler
    again: enough for tests, and for handlers whose effect is safe to
    repeat. A claim has no lease: only the process's death outlives a
    handler here, and that takes the claim with it.

    :param retention: seconds a done id is kept after its handler returned.
    :param clock: seconds, for the retention; monotonic, since the ids
        live no longer than the process.
    """

    def __init__(
        self,
        *,
        retention: float = DEFAULT_INBOX_RETENTION,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retention = check_positive("retention", retention)
        self._clock = clock
        # Oldest first, by the time the handler returned, so the purge stops
        # at the first id still within its retention.
        self._done: OrderedDict[str, float] = OrderedDict()
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def handle(self, event_id: str, handler: Callable[[], object]) -> bool:
        _check_event_id(event_id)
        with self._lock:
            self._purge(self._clock())
            if event_id in self._done:
                return False
            if event_id in self._running:
                raise DeliveryInProgress(event_id)
            self._running.add(event_id)
        # The handler runs outside the lock: other ids go on meanwhile.
        try:
            handler()
        except BaseException:
            with self._lock:
                self._running.discard(event_id)
            raise
        with self._lock:
            self._running.discard(event_id)
            self._done[event_id] = self._clock()
            self._done.move_to_end(event_id)
        return True

    def _purge(self, now: float) -> None:
        while self._done:
            done_at = next(iter(self._done.values()))
            if now - done_at < self.retention:
                return
            self._done.popitem(last=False)


class SQLiteInbox:
    """An inbox in a SQLite file: it survives restarts and is shared by processes and threads.

    An id goes through three states in one row: absent (never run, or its
    handler raised), **claimed** (``owner`` and ``lease_until`` set: a
    delivery is running the handler) and **done** (``done_at`` set). The
    claim is taken in a transaction of its own (``BEGIN IMMEDIATE``, so that
    of two processes delivering one id at once, one claims it and the other
    finds the claim), and committed before the handler runs; the handler
    runs outside any transaction, so other ids go on meanwhile. Its return
    marks the id done; its exception deletes the claim, so the next
    delivery runs it again. A process killed mid-handler leaves its claim,
    and the claim's lease is what frees the id: once ``lease_until`` has
    passed, the next delivery claims it over.

    A handler that runs longer than the lease may be run a second time by a
    delivery that arrives meanwhile: raise ``lease`` above the handler's
    longest run. The first to return marks the id done; a later one logs a
    warning.

    :param path: the database file; created with its table when missing.
    :param retention: seconds a done id is kept after its handler returned
        (a lapsed claim, the same after its lease).
    :param lease: seconds a claim holds the id; see :data:`DEFAULT_INBOX_LEASE`.
    :param timeout: seconds to wait for another process's write lock.
    :param clock: Unix time; wall-clock time, because the file outlives
        the process, and other processes read its times.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention: float = DEFAULT_INBOX_RETENTION,
        lease: float = DEFAULT_INBOX_LEASE,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        require_file(path, "SQLiteInbox", "MemoryInbox")
        self.path = path
        self.retention = check_positive("retention", retention)
        self.lease = check_positive("lease", lease)
        self._timeout = timeout
        self._clock = clock
        with self._transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS webhook_inbox ("
                " event_id TEXT PRIMARY KEY,"
                # A claim: who runs the handler (a random id per delivery),
                # and until when (Unix time) the claim holds. NULL once done.
                " owner TEXT,"
                " lease_until REAL,"
                # When the handler returned (Unix time); NULL until then.
                " done_at REAL)"
            )
            # The purge on every use reads the oldest rows only; SQLite uses
            # an index on an expression for a query with the same expression.
            db.execute(
                "CREATE INDEX IF NOT EXISTS webhook_inbox_expiry"
                " ON webhook_inbox (coalesce(done_at, lease_until))"
            )

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self.path, timeout=self._timeout)

    def handle(self, event_id: str, handler: Callable[[], object]) -> bool:
        _check_event_id(event_id)
        owner = self._claim(event_id)
        if owner is None:
            return False
        try:
            handler()
        except BaseException:
            # Should this fail too (the file locked past the timeout), the
            # claim stays and lapses with its lease.
            self._release(event_id, owner)
            raise
        self._finish(event_id, owner)
        return True

    def _claim(self, event_id: str) -> str | None:
        """A new claim's owner, or ``None`` if the id is done.

        :raises DeliveryInProgress: another delivery holds a live claim.
        """
        now = self._clock()
        with self._transaction() as db:
            db.execute(
                "DELETE FROM webhook_inbox WHERE coalesce(done_at, lease_until) <= ?",
                (now - self.retention,),
            )
            row = db.execute(
                "SELECT done_at, lease_until FROM webhook_inbox WHERE event_id = ?", (event_id,)
            ).fetchone()
            if row is not None and row[0] is not None:
                return None
            if row is not None and row[1] > now:
                raise DeliveryInProgress(event_id)
            # None yet, or one whose holder died (or overran): take it over.
            owner = uuid.uuid4().hex
            db.execute(
                "INSERT INTO webhook_inbox (event_id, owner, lease_until) VALUES (?, ?, ?)"
                " ON CONFLICT (event_id) DO UPDATE"
                " SET owner = excluded.owner, lease_until = excluded.lease_until",
                (event_id, owner, now + self.lease),
            )
        return owner

    def _release(self, event_id: str, owner: str) -> None:
        # Only this delivery's claim: one that took over after the lease, or
        # its done mark, is not ours to drop.
        with self._transaction() as db:
            db.execute(
                "DELETE FROM webhook_inbox WHERE event_id = ? AND owner = ?", (event_id, owner)
            )

    def _finish(self, event_id: str, owner: str) -> None:
        now = self._clock()
        with self._transaction() as db:
            row = db.execute(
                "SELECT owner FROM webhook_inbox WHERE event_id = ?", (event_id,)
            ).fetchone()
            if row is None or row[0] != owner:
                _log.warning(
                    "event %s: the handler outlived its %g s lease, and another delivery may"
                    " have run it too; raise SQLiteInbox's lease above the handler's longest run",
                    event_id,
                    self.lease,
                )
            # Done whoever holds the claim now: the handler did return. A
            # done mark already there (the other delivery's) stays as it is.
            db.execute(
                "INSERT INTO webhook_inbox (event_id, done_at) VALUES (?, ?)"
                " ON CONFLICT (event_id) DO UPDATE"
                " SET owner = NULL, lease_until = NULL, done_at = excluded.done_at"
                " WHERE done_at IS NULL",
                (event_id, now),
            )
