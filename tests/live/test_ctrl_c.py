"""Ctrl-C in a terminal stops gunicorn at once, whatever its threads were doing.

A terminal sends Ctrl-C's SIGINT to every process of its foreground group:
gunicorn's arbiter and each of its workers at once, and the arbiter then
sends each worker SIGQUIT. gunicorn's threaded worker shut its thread pool
down from the handler, under the pool's lock; when the signal landed while
its main thread held that lock (queueing a request, or handling the other
signal), it waited for itself until the arbiter killed it, after
``graceful_timeout`` (30 s), logging "was sent SIGKILL". Raising
``SystemExit`` from the handler, as gunicorn's base worker does, had the
same flaw more rarely (a lock taken when it was raised stayed taken for
Python's exit), so the worker's handler now only clears ``alive``.

The first test is the whole story, as a user meets it; the race it can
lose is narrow, so the second provokes it on purpose: the signal is
delivered while the worker hands a request to its thread pool, holding
the pool's lock.
"""

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests

from accounts.services import create_api_client
from api.gunicorn_worker import ProblemJsonThreadWorker
from tests.support import servers
from tests.support.live import (
    BIN,
    ROOT,
    LiveService,
    free_port,
    suite_database_env,
    wait_until_healthy,
)

# Well under gunicorn's graceful_timeout (30 s), after which the arbiter
# would kill a stuck worker anyway.
STOPPED_WITHIN_S = 10


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_stops_the_server_without_killing_a_stuck_worker(tmp_path: Path) -> None:
    port = free_port()
    env = {**suite_database_env(), "BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "2"}
    log = tmp_path / "gunicorn.log"
    server = servers.start(
        "gunicorn",
        [str(BIN / "gunicorn"), "-c", "config/gunicorn.py", "config.wsgi:application"],
        log=log,
        cwd=ROOT,
        env=env,
        # Its own process group, as a shell gives a foreground job.
        start_new_session=True,
    )
    service = LiveService(base_url=f"http://127.0.0.1:{port}")
    wait_until_healthy(service, [server])
    headers = {"Authorization": f"Bearer {create_api_client(tenant_slug='t', name='p').token}"}
    # Requests in parallel, so that each worker runs several threads, each
    # with its database connection.
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda _: requests.get(service.url("/v1/orders"), headers=headers, timeout=5),
                range(64),
            )
        )

    started = time.monotonic()
    os.killpg(server.pid, signal.SIGINT)
    try:
        server.wait(timeout=STOPPED_WITHIN_S * 4)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
    stopped_after = time.monotonic() - started

    assert stopped_after < STOPPED_WITHIN_S, servers.evidence()
    assert "SIGKILL" not in log.read_text(), servers.evidence()


class _SignalOnPut:
    """A work queue that delivers a signal to the worker as a request is queued.

    ThreadPoolExecutor.submit queues its work while it holds the pool's
    lock, so the handler runs where a real signal's runs when it arrives
    just then.
    """

    def __init__(self, queue: Any, deliver: Any) -> None:
        self.queue, self.deliver = queue, deliver

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.queue.put(item)
        self.deliver()

    def __getattr__(self, name: str) -> Any:
        # The pool's threads take their work from the real queue.
        return getattr(self.queue, name)


def test_a_quit_signal_while_a_request_is_handed_to_a_thread_does_not_hang_the_worker() -> None:
    # The worker as far as quitting needs: its pool, and a config to call.
    worker = object.__new__(ProblemJsonThreadWorker)
    worker.cfg = SimpleNamespace(worker_int=lambda worker: None)
    worker.alive = True
    worker.tpool = ThreadPoolExecutor(2)
    worker.tpool._work_queue = _SignalOnPut(
        worker.tpool._work_queue, lambda: worker.handle_quit(signal.SIGINT, None)
    )
    handed_over: list[object] = []

    def accept_a_request() -> None:
        handed_over.append(worker.tpool.submit(time.sleep, 0).result())

    # A thread of its own, so that a hang fails this test instead of the run.
    main = threading.Thread(target=accept_a_request, daemon=True)
    main.start()
    main.join(timeout=STOPPED_WITHIN_S)

    assert not main.is_alive(), "the worker hung in its quit handler"
    # The request handed over when the signal came is served, and the worker
    # then leaves its main loop.
    assert handed_over == [None]
    assert worker.alive is False
    worker.tpool.shutdown()
