"""Where idempotency keys live between attempts, calls and restarts: :class:`KeyStore`.

A key names one **intended action** ("pay order ord_42 for invoice 7"),
not one request: every retry of the action must carry the same key, or a
retry after a lost answer becomes a second payment. Within one call the
client keeps the key itself. Across calls, and across a crash, something
must remember it. That is a key store: the caller names the action (an
``intent``, any string it can compute again, such as ``"pay:invoice-7"``)
and the store hands out the same key for it until it is told to forget.

- :class:`MemoryKeyStore` remembers for the life of the process: enough to
  retry an action after :class:`~order_service_client.RetriesExhausted`.
- :class:`SQLiteKeyStore` remembers on disk: a process that crashes after
  sending a command, and is started again, resumes the action under the
  same key and gets the stored answer instead of executing it twice. The
  key is committed before the first attempt leaves, so there is no moment
  at which a request is out and its key could be lost.

The client forgets an intent once the service gave the action its final
answer (a success, or a refusal the service stored as the command's
outcome), so that the same intent can name a new action later. It keeps
the key when the outcome is still unknown, and when the request was
refused before the command ran (see
:class:`~order_service_client.OrderServiceClient`).

Forgetting leaves one window open: a process that dies after the answer
arrived and the intent was forgotten, but before it recorded the outcome
itself, starts a new action when it runs the same intent again. Name
intents after something the service refuses to do twice anyway (paying
one order: ``OrderAlreadyPaid``), or keep the keys in your own database
with a store whose ``forget`` does nothing, and delete an intent's key
yourself in the transaction that records its outcome.

The service keeps a key for ``IDEMPOTENCY_KEY_TTL`` (24 hours by default);
after that it is a new key to the service. An action resumed later than
that may execute again, whatever the store holds: reconcile it against
your own records, or with ``lookup_key``, before resuming it.

Any object with ``key_for`` and ``forget`` is a store (:class:`KeyStore`
is a protocol), such as that one on the application's own database.
"""

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Protocol, runtime_checkable

__all__ = ["KeyStore", "MemoryKeyStore", "SQLiteKeyStore", "new_key"]


def new_key() -> str:
    """A fresh idempotency key: a random UUID, unguessable and never reused by chance."""
    return str(uuid.uuid4())


@runtime_checkable
class KeyStore(Protocol):
    """Maps an intent to its idempotency key, the same one until it is forgotten."""

    def key_for(self, intent: str) -> str:
        """The intent's key: the one it has, or a new one, remembered before it is returned."""
        ...

    def forget(self, intent: str) -> None:
        """Drop the intent's key; its next use gets a new key. Forgetting twice is harmless."""
        ...


class MemoryKeyStore:
    """A key store in this process's memory, safe to share between threads."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()

    def key_for(self, intent: str) -> str:
        with self._lock:
            return self._keys.setdefault(intent, new_key())

    def forget(self, intent: str) -> None:
        with self._lock:
            self._keys.pop(intent, None)


class SQLiteKeyStore:
    """A key store in a SQLite file: it survives restarts and is shared by processes and threads.

    Each call opens its own connection (SQLite connections must not be
    shared between threads without care, and opening one is cheap) and
    runs in a transaction of its own, so that two processes asking for the
    same intent at once get the same key: the database, not a check in
    Python, decides which key wins.

    :param path: the database file; created with its table when missing.
    :param timeout: seconds to wait for another process's write lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        if os.fspath(path) in {"", ":memory:"}:
            # Every call opens its own connection, which would see its own
            # empty database: use MemoryKeyStore for keys in memory.
            raise ValueError("SQLiteKeyStore needs a file; use MemoryKeyStore in memory")
        self.path = path
        self._timeout = timeout
        with self._transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS idempotency_keys ("
                " intent TEXT PRIMARY KEY,"
                " key TEXT NOT NULL,"
                # Unix time, for an operator who looks for keys older than
                # the service keeps them.
                " created_at REAL NOT NULL)"
            )

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None leaves transactions to the explicit BEGIN
        # below, the same on every Python from 3.11.
        with closing(sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)) as db:
            # IMMEDIATE takes the write lock up front: the insert and the
            # read below see one state of the table, with no forget() of
            # another process between them.
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            # SQLite's default synchronous=FULL: once COMMIT returns, the
            # key is on disk, before any request that carries it is sent.
            db.execute("COMMIT")

    def key_for(self, intent: str) -> str:
        with self._transaction() as db:
            # The primary key arbitrates: of two processes inserting at
            # once, one inserts and the other's insert is ignored, and both
            # read the row that won.
            db.execute(
                "INSERT OR IGNORE INTO idempotency_keys (intent, key, created_at) VALUES (?, ?, ?)",
                (intent, new_key(), time.time()),
            )
            row = db.execute(
                "SELECT key FROM idempotency_keys WHERE intent = ?", (intent,)
            ).fetchone()
        key: str = row[0]
        return key

    def forget(self, intent: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM idempotency_keys WHERE intent = ?", (intent,))
