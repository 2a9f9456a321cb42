"""Where idempotency keys live between attempts, calls and restarts: :class:`KeyStore`.

A key names one **intended action** ("pay order ord_42 for invoice 7"),
not one request: every retry of the action must carry the same key, or a
retry after a lost answer becomes a second payment. Within one call the
client keeps the key itself. Across calls, and across a crash, something
must remember it. That is a key store: the caller names the action (an
``intent``, any string it can compute again, such as ``"pay:invoice-7"``)
and the store hands out the same key for it.

- :class:`MemoryKeyStore` remembers for the life of the process: enough to
  retry an action after :class:`~order_service_client.RetriesExhausted`.
- :class:`SQLiteKeyStore` remembers on disk: a process that crashes after
  sending a command, and is started again, resumes the action under the
  same key and gets the stored answer instead of executing it twice. The
  key is committed before the first attempt leaves, so there is no moment
  at which a request is out and its key could be lost.

**An intent keeps its key for the service's retention, whatever the
answer.** The service keeps a key, and replays its stored answer, for
``IDEMPOTENCY_KEY_TTL`` (24 hours by default, docs/SPECIFICATION.md §3
rule 10). A store that keeps the intent's key as long hands the same key
to every run of the same code within that time, and each rerun gets the
first run's answer (``Idempotent-Replayed: true``) instead of a second
order or a second charge. A store that dropped the key once the answer
came would reopen the very window the key closes: a program that runs
twice, or dies after the answer arrived and before it recorded the
outcome, would act again under a new key. So a final answer, success or
refusal, never makes the store forget; only time does.

- ``retention`` (seconds, :data:`DEFAULT_RETENTION` = 24 h, the service's
  default) is counted from the intent's **first use**, the call that
  first took its key: the earliest moment a request under it can have
  reached the service, whose own retention counts from the first request
  that did. A key is never sent again once the service may have forgotten
  it (docs/SPECIFICATION.md §3 rule 15): to the service it would be a new
  key, and the command would run again with nothing to say so. The client
  reads the service's retention from its published policy
  (:mod:`order_service_client.policy`) and stops a call's retries at the
  key's end (:meth:`MemoryKeyStore.lease` tells it how long ago the key was
  first used), raising :class:`~order_service_client.errors.KeyLifetimeOver`.
  Keep ``retention`` at least the service's ``IDEMPOTENCY_KEY_TTL``; a
  shorter one hands out a new key while the service would still have
  replayed the old one.
- Entries first used more than ``retention`` ago are purged whenever the
  store is used, so its size is bounded by the intents of one retention
  period. An expired intent gets a new key: to the service the old one
  may be a new key by then anyway. (An intent whose first calls reached
  nothing and that got through only later is the one case where the
  service would still have replayed the old key; it was not kept past
  the earliest moment the service may forget it, which the client cannot
  tell apart.)
- An intent names one action for its retention. Its key replays that
  action's answer, refusals included: a command the service refused
  (``422``, ``412`` …) is refused again on every rerun. Under the same
  key a corrected body is ``409 IdempotencyKeyConflict``, and a fresh
  ``if_match`` only replays the ``412`` (``If-Match`` is not part of the
  request's fingerprint), so a new decision needs a new intent name:
  name intents after what the decision depends on
  (``f"cancel:{order_id}:{etag}"``), or :meth:`forget <SQLiteKeyStore.forget>`
  the intent deliberately once its outcome is recorded.

Past the service's retention nothing a client keeps makes a late retry
safe: the key is new to the service, which executes it again, and a
look-up of it answers ``404`` whether or not it ran. Reconcile such an
action against the resources themselves (an order placed with
``put_order`` under an id of your own is found by that id for as long as
it exists).

Any object with ``key_for`` is a store (:class:`KeyStore` is a protocol),
such as one on the application's own database, whose key can then be
written in the same transaction as the rest of the intent.
"""

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

__all__ = [
    "DEFAULT_RETENTION",
    "KeyStore",
    "LeasingKeyStore",
    "MemoryKeyStore",
    "SQLiteKeyStore",
    "new_key",
]

# The service's IDEMPOTENCY_KEY_TTL by default: the time within which a rerun
# under the same key is replayed rather than executed.
DEFAULT_RETENTION = 24 * 60 * 60.0


def new_key() -> str:
    """A fresh idempotency key: a random UUID, unguessable and never reused by chance."""
    return str(uuid.uuid4())


@runtime_checkable
class KeyStore(Protocol):
    """Maps an intent to its idempotency key, the same one for as long as the service keeps it."""

    def key_for(self, intent: str) -> str:
        """The intent's key: the one it has, or a new one, remembered before it is returned."""
        ...


@runtime_checkable
class LeasingKeyStore(KeyStore, Protocol):
    """A key store that also says how long an intent's key has left (both stores here do).

    The client then never retries under the key past the service's
    retention counted from the key's first use. With a store that has
    only ``key_for``, the client counts the retention from the call.
    """

    def lease(self, intent: str) -> tuple[str, float]:
        """The intent's key (as :meth:`key_for`) and the seconds left of its retention."""
        ...


class MemoryKeyStore:
    """A key store in this process's memory, safe to share between threads.

    :param retention: seconds an intent keeps its key after its first use.
    :param clock: seconds, for the retention; monotonic, since the keys
        live no longer than the process.
    """

    def __init__(
        self,
        *,
        retention: float = DEFAULT_RETENTION,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retention = check_positive("retention", retention)
        self._clock = clock
        # Intent → (key, first use), oldest first (an entry is added at its
        # first use and never moved), so the purge stops at the first entry
        # still within its retention.
        self._keys: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def key_for(self, intent: str) -> str:
        return self.lease(intent)[0]

    def lease(self, intent: str) -> tuple[str, float]:
        with self._lock:
            now = self._clock()
            self._purge(now)
            if intent not in self._keys:
                self._keys[intent] = (new_key(), now)
            key, first_used = self._keys[intent]
            return key, first_used + self.retention - now

    def forget(self, intent: str) -> None:
        """Drop the intent's key, so that its next use starts a new action. Harmless twice."""
        with self._lock:
            self._keys.pop(intent, None)

    def _purge(self, now: float) -> None:
        while self._keys:
            _, first_used = next(iter(self._keys.values()))
            if now - first_used < self.retention:
                return
            self._keys.popitem(last=False)


class SQLiteKeyStore:
    """A key store in a SQLite file: it survives restarts and is shared by processes and threads.

    Each call opens its own connection (SQLite connections must not be
    shared between threads without care, and opening one is cheap) and
    runs in a transaction of its own, so that two processes asking for the
    same intent at once get the same key: the database, not a check in
    Python, decides which key wins.

    :param path: the database file; created with its table when missing.
    :param retention: seconds an intent keeps its key after its first use.
    :param timeout: seconds to wait for another process's write lock.
    :param clock: Unix time; wall-clock time, because the file outlives
        the process, and other processes read its times.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention: float = DEFAULT_RETENTION,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        require_file(path, "SQLiteKeyStore", "MemoryKeyStore")
        self.path = path
        self.retention = check_positive("retention", retention)
        self._timeout = timeout
        self._clock = clock
        with self._transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS idempotency_keys ("
                " intent TEXT PRIMARY KEY,"
                " key TEXT NOT NULL,"
                # Unix times: the key's first use, from which the retention
                # counts, and its last, for an operator.
                " created_at REAL NOT NULL,"
                " used_at REAL NOT NULL)"
            )
            columns = {row[1] for row in db.execute("PRAGMA table_info(idempotency_keys)")}
            if "used_at" not in columns:
                # A file written before keys were kept for their retention
                # holds only intents whose outcome was still open: keep them.
                db.execute("ALTER TABLE idempotency_keys ADD COLUMN used_at REAL")
                db.execute("UPDATE idempotency_keys SET used_at = created_at")
            # The purge on every use reads the oldest entries only.
            db.execute(
                "CREATE INDEX IF NOT EXISTS idempotency_keys_created_at"
                " ON idempotency_keys (created_at)"
            )

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self.path, timeout=self._timeout)

    def key_for(self, intent: str) -> str:
        return self.lease(intent)[0]

    def lease(self, intent: str) -> tuple[str, float]:
        now = self._clock()
        with self._transaction() as db:
            db.execute(
                "DELETE FROM idempotency_keys WHERE created_at <= ?", (now - self.retention,)
            )
            # The primary key arbitrates: of two processes inserting at
            # once, one inserts and the other's insert is ignored, and both
            # read the row that won.
            db.execute(
                "INSERT OR IGNORE INTO idempotency_keys (intent, key, created_at, used_at)"
                " VALUES (?, ?, ?, ?)",
                (intent, new_key(), now, now),
            )
            # max(): a process whose clock lags another's never moves the
            # last use back.
            db.execute(
                "UPDATE idempotency_keys SET used_at = max(used_at, ?) WHERE intent = ?",
                (now, intent),
            )
            row = db.execute(
                "SELECT key, created_at FROM idempotency_keys WHERE intent = ?", (intent,)
            ).fetchone()
        key: str = row[0]
        return key, float(row[1]) + self.retention - now

    def forget(self, intent: str) -> None:
        """Drop the intent's key, so that its next use starts a new action. Harmless twice.

        The client never calls it: an answer does not end an intent, the
        retention does. Call it once the application has recorded the
        intent's outcome and means the same name for a new action.
        """
        with self._transaction() as db:
            db.execute("DELETE FROM idempotency_keys WHERE intent = ?", (intent,))
