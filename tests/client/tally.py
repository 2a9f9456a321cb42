"""A feed consumer whose effect is wrong if made twice: what the checkpoint tests count.

Each event handled adds one to its type's count and writes its id, in the
consumer's own SQLite file, where the checkpoint goes too; ``crash_at``
dies (:class:`Crash`) inside the handler of that event, after its effect
was written and before anything committed. Shared by the client's tests
against a scripted feed (tests/client/test_feed.py) and against the
service (tests/live/test_client_feed.py).
"""

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any


class Crash(Exception):
    """The consumer's process dying inside a handler, after its effect was written."""


def consumer_database(path: Path, *more_tables: str) -> Path:
    """``path``, a new SQLite file with the tally's tables and ``more_tables``' statements."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE tally (type TEXT PRIMARY KEY, n INTEGER)")
        db.execute("CREATE TABLE counted (event_id TEXT)")
        for table in more_tables:
            db.execute(table)
    return path


def tally(db: sqlite3.Connection, event: dict[str, Any], *, crash_at: str | None = None) -> None:
    """The effect: a count per type, and the ids counted."""
    db.execute(
        "INSERT INTO tally (type, n) VALUES (?, 1) ON CONFLICT (type) DO UPDATE SET n = n + 1",
        (event["type"],),
    )
    db.execute("INSERT INTO counted (event_id) VALUES (?)", (event["id"],))
    if event["id"] == crash_at:
        raise Crash(event["id"])


def rows(path: Path, query: str) -> list[Any]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(query).fetchall()


def counted(path: Path) -> list[str]:
    """The ids counted, in the order they were."""
    return [row[0] for row in rows(path, "SELECT event_id FROM counted ORDER BY rowid")]
