"""Reading the event feed: the consumer's checkpoint, committed with its effect.

``GET /v1/events`` is a log: every event of the tenant, once, oldest first,
in an order that never changes (docs/SPECIFICATION.md §4 rule 12). A
consumer reads it from its start, or ``after`` the last event it handled
(:meth:`OrderServiceClient.list_events`), and so must remember that event:
its checkpoint. Where the checkpoint is written decides what a crash does:

- written after the effect, in a transaction of its own, a crash between
  the two makes the next read hand the event over again, and the effect is
  made twice;
- written before it, the same crash loses the effect for good.

:class:`SQLiteFeedCheckpoint` writes it in the same transaction as the
effect, in the consumer's own SQLite file: both commit, or neither does,
and a read that resumes from the checkpoint hands over exactly the events
whose effects are not made. The same works in any database the effects
live in: read the checkpoint; then, per event, one transaction that makes
the effect and moves the checkpoint on if it still holds the position read.

A consumer whose effects live elsewhere (an email, a call to another
service) cannot commit them with anything. It hands each event to an
:class:`~order_service_client.inbox.Inbox` (``inbox.handle(event["id"],
handler)``), which runs the handler once per event id, and moves the
checkpoint afterwards (``checkpoint.handle(event)``): an event read again
after a crash between the two finds its id done and runs nothing.

Past the retention: the service keeps events ``EVENT_RETENTION`` (30
days). A checkpoint older than that names no event, and the read raises
:class:`~order_service_client.errors.FeedCheckpointLost` rather than start
again from the feed's start or skip ahead; :meth:`SQLiteFeedCheckpoint.reset`
is the way back.
"""

import os
import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from order_service_client._sqlite import immediate_transaction
from order_service_client.errors import OrderServiceError

__all__ = ["FeedCheckpointMoved", "SQLiteFeedCheckpoint"]

# What a handler gets and does: the open transaction, to write its effect in.
Handler = Callable[[sqlite3.Connection], object]


class FeedCheckpointMoved(OrderServiceError):
    """Another reader moved the checkpoint since this one read it: nothing of this event was made.

    Two readers of one checkpoint would each make every effect; the second
    to commit finds the checkpoint moved, rolls its effect back and stops
    here. Read :meth:`SQLiteFeedCheckpoint.position` again and go on from
    there, or leave the feed to the other reader.

    :ivar name: the checkpoint's name.
    :ivar expected: the position this reader had, ``None`` for the start.
    :ivar found: the position another reader wrote.
    """

    def __init__(self, name: str, expected: str | None, found: str | None) -> None:
        super().__init__(
            f"the feed checkpoint {name!r} is at {found or 'the start'}, not at"
            f" {expected or 'the start'} as this reader read it: another reader moved it,"
            " and nothing of this event was made"
        )
        self.name = name
        self.expected = expected
        self.found = found


class SQLiteFeedCheckpoint:
    """A feed consumer's checkpoint in a SQLite file, moved in the transaction of the effect.

    ::

        checkpoint = SQLiteFeedCheckpoint("consumer.sqlite3")
        for event in client.list_events(after=checkpoint.position()):
            checkpoint.handle(event, lambda db: db.execute("INSERT INTO …", …))

    :meth:`handle` opens one transaction (``BEGIN IMMEDIATE``) on the file,
    runs the handler with its connection, records the event as the
    checkpoint and commits: the handler's writes and the checkpoint land
    together, and a handler that raises, or a process that dies in it,
    leaves neither. Keep the consumer's own tables in this file, or they
    are not in the transaction.

    It is a compare-and-set: the checkpoint moves only from the position
    this object last read (:meth:`position`) or wrote. One reader per
    checkpoint; a second one stops with :class:`FeedCheckpointMoved` rather
    than make an effect twice.

    :param path: the database file; created with its table when missing.
    :param name: which checkpoint: one file may hold several, one per feed
        read (a ``type=`` filter, another service).
    :param timeout: seconds to wait for another process's write lock.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, name: str = "events", timeout: float = 30.0
    ) -> None:
        if os.fspath(path) in {"", ":memory:"}:
            # Every transaction opens its own connection, which would see an
            # empty database of its own.
            raise ValueError("SQLiteFeedCheckpoint needs a file, the one your own tables are in")
        if not name:
            raise ValueError("a checkpoint needs a name")
        self.path = path
        self.name = name
        self._timeout = timeout
        # The position this reader stands at: last read or written. Unset
        # until position() is read, since the read starts from it.
        self._at: str | None = None
        self._read = False
        with self._transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS feed_checkpoint ("
                " name TEXT PRIMARY KEY,"
                # The last event handled; NULL: none, read from the start.
                " event_id TEXT)"
            )

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self.path, timeout=self._timeout)

    def position(self) -> str | None:
        """The last event handled, to read ``after``; ``None``: from the feed's start."""
        with self._transaction() as db:
            self._at = _stored(db, self.name)
        self._read = True
        return self._at

    def handle(self, event: Mapping[str, Any], handler: Handler | None = None) -> None:
        """Run ``handler`` and move the checkpoint to ``event``, in one transaction.

        :param event: the event, as :meth:`OrderServiceClient.list_events` yields it.
        :param handler: your effect: called with the transaction's
            connection, it writes with it and neither commits nor rolls
            back. Raise to undo it. ``None``: only move the checkpoint (an
            inbox made the effect).
        :raises FeedCheckpointMoved: another reader moved the checkpoint;
            the handler did not run.
        :raises: whatever the handler raised; nothing was written.
        """
        if not self._read:
            raise RuntimeError("read position() first: the feed is read after it")
        event_id = event["id"]
        with self._transaction() as db:
            self._check_unmoved(db)
            if handler is not None:
                handler(db)
            _store(db, self.name, event_id)
        self._at = event_id

    def reset(self, handler: Handler | None = None) -> None:
        """Forget the position, so the next read starts from the feed's start, with ``handler``.

        The way back from :class:`~order_service_client.errors.FeedCheckpointLost`:
        ``handler`` rebuilds your state from the resources, and commits with
        the reset, so that a crash during the rebuild leaves the lost
        checkpoint to fail again rather than a half-built state to read on from.

        :raises FeedCheckpointMoved: another reader moved the checkpoint.
        """
        with self._transaction() as db:
            if self._read:
                self._check_unmoved(db)
            if handler is not None:
                handler(db)
            _store(db, self.name, None)
        self._at, self._read = None, True

    def _check_unmoved(self, db: sqlite3.Connection) -> None:
        found = _stored(db, self.name)
        if found != self._at:
            raise FeedCheckpointMoved(self.name, self._at, found)


def _stored(db: sqlite3.Connection, name: str) -> str | None:
    row = db.execute("SELECT event_id FROM feed_checkpoint WHERE name = ?", (name,)).fetchone()
    return None if row is None else row[0]


def _store(db: sqlite3.Connection, name: str, event_id: str | None) -> None:
    db.execute(
        "INSERT INTO feed_checkpoint (name, event_id) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET event_id = excluded.event_id",
        (name, event_id),
    )
