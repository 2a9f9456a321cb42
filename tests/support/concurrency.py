"""Real concurrency: threads released together, a Celery worker, waits on the database."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import connections

from tests.support.waits import wait_for

if TYPE_CHECKING:
    # For the type alone: a model is imported once Django is set up, which
    # a module of tests/support does not assume.
    from operations.models import Operation

# The ``finished_operation`` fixture: waits for an operation (by id) to
# leave ``processing`` and returns it.
FinishedOperation = Callable[[str], "Operation"]


def run_concurrently(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` in ``n`` threads released at the same instant.

    Each thread has its own database connection (Django's are per thread),
    so these are real concurrent transactions; each closes its connection.
    """
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def lock_waiters() -> int:
    """How many connections to the test database wait on a lock now."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        waiting: int = cursor.fetchone()[0]
        return waiting


def wait_for_lock_waiters(count: int = 1, timeout: float = 10.0) -> None:
    """Until ``count`` connections (or more) to the test database wait on a lock.

    The database offers no event for it: ``pg_stat_activity`` is polled.
    """
    wait_for(
        lock_waiters,
        lambda waiting: waiting >= count,
        timeout,
        what=f"{count} or more connections to the test database waiting on a lock",
    )


@contextmanager
def running_worker() -> Iterator[Any]:
    """A real Celery worker, in a thread of this process, on the real broker; the worker.

    Tasks are published after commit and travel through the broker, as in
    production: nothing runs eagerly.
    """
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    with start_worker(
        app, pool="solo", perform_ping_check=False, loglevel="WARNING", shutdown_timeout=30
    ) as worker:
        yield worker
    connections.close_all()
