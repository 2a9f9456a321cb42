"""The embedded broker (kombu's SQLAlchemy transport on a SQLite file) under several processes.

``make run`` starts a Celery worker beside gunicorn on a fresh broker file,
and both create the broker's tables and the task queue's row as they start
(the worker to consume, gunicorn to publish its first task). kombu creates
them check-then-insert under a lock that serialises one process only, so
the loser of the race got "table already exists" or a unique violation,
and a worker that lost it died ("Unrecoverable error"): payments then
stayed processing. config/celery.py makes the loser use what the winner
made.
"""

import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

PROCESSES = 6
# Without config/celery.py's channel nearly every round loses the tables'
# race; the queue row's race is rarer, and more rounds give it more chances.
ROUNDS = 4


def _declare_the_task_queue(start: Barrier) -> None:
    from config.celery import app

    with app.connection_for_write() as connection:
        channel = connection.default_channel
        start.wait()
        channel.queue_declare(queue=app.conf.task_default_queue)


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_processes_creating_the_queue_at_once_all_succeed(
    round_: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read by each new process's settings: a fresh broker file per round.
    monkeypatch.setenv("CELERY_BROKER_URL", f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}")
    monkeypatch.setenv("VAR_DIR", str(tmp_path))
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(PROCESSES)
    processes = [
        spawn.Process(target=_declare_the_task_queue, args=(start,)) for _ in range(PROCESSES)
    ]

    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)

    assert [process.exitcode for process in processes] == [0] * PROCESSES
