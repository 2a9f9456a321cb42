"""What the SQLite stores share: a file of their own, and a transaction per call.

:class:`~order_service_client.keys.SQLiteKeyStore` and
:class:`~order_service_client.inbox.SQLiteInbox` keep their rows in a file
that several processes and threads use at once. Each call opens its own
connection (SQLite connections must not be shared between threads without
care, and opening one is cheap) and runs in a transaction of its own.
"""

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager


def check_positive(name: str, seconds: float) -> float:
    """``seconds`` as a float; a ``ValueError`` naming ``name`` unless it is above 0."""
    if not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds")
    return float(seconds)


def require_file(path: str | os.PathLike[str], store: str, in_memory: str) -> None:
    """A ``ValueError`` for no path or ``:memory:``, which names ``in_memory`` instead.

    Every call opens its own connection, which would see its own empty
    in-memory database.
    """
    if os.fspath(path) in {"", ":memory:"}:
        raise ValueError(f"{store} needs a file; use {in_memory} in memory")


@contextmanager
def immediate_transaction(
    path: str | os.PathLike[str], *, timeout: float
) -> Iterator[sqlite3.Connection]:
    """A new connection to ``path``, in a transaction that holds the write lock from its start.

    ``timeout``: seconds to wait for another process's write lock.
    """
    # isolation_level=None leaves transactions to the explicit BEGIN below,
    # the same on every Python from 3.11.
    with closing(sqlite3.connect(path, timeout=timeout, isolation_level=None)) as db:
        # IMMEDIATE takes the write lock up front: what the transaction reads,
        # no other process changes before it writes.
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        # SQLite's default synchronous=FULL: once COMMIT returns, the rows are
        # on disk (a key, before any request that carries it is sent).
        db.execute("COMMIT")
