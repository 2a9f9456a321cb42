"""The service as deployed: gunicorn (and a Celery worker) in their own processes."""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.support.concurrency import wait_until

# The repository, two folders above this file.
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class LiveService:
    base_url: str

    def url(self, path: str) -> str:
        return self.base_url + path

    @property
    def address(self) -> tuple[str, int]:
        """(host, port), for a raw socket."""
        host, port = self.base_url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)


def post_command(
    url: str, body: Any, *, token: str, key: str, timeout: float = 30
) -> requests.Response:
    """A command as a client sends it over HTTP: a JSON body, a bearer token, a key."""
    return requests.post(
        url,
        data=json.dumps(body),
        headers={
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
        timeout=timeout,
    )


def paid_order(
    service: LiveService,
    token: str,
    *,
    key: str,
    send: Callable[..., requests.Response] = post_command,
) -> str:
    """An order placed and paid over HTTP, under keys of their own; the payment's id.

    Returns once the worker has charged it. ``send`` sends each command
    (``post_command``'s arguments), and may retry it under its key.
    """
    # Django's models are behind these: imported where Django is set up.
    from tests.support.http import ORDER, payment_body

    placed = send(service.url("/v1/orders"), ORDER, token=token, key=f"{key}-order")
    body = payment_body(placed.json()["order"])
    accepted = send(service.url("/v1/payments"), body, token=token, key=f"{key}-pay")
    operation = service.url(accepted.headers["Location"])
    headers = {"Authorization": f"Bearer {token}"}
    wait_until(
        lambda: requests.get(operation, headers=headers, timeout=5).json()["status"] == "succeeded",
        30,
        interval=0.05,
        what="the payment succeeding",
    )
    return str(accepted.json()["paymentId"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def manage(*args: str, env: Mapping[str, str]) -> str:
    """Run ``manage.py`` in its own process; returns its stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


@contextmanager
def serve(
    env: Mapping[str, str],
    *,
    web_workers: int = 2,
    celery: bool = False,
    gunicorn_args: Sequence[str] = (),
    app: str = "config.wsgi:application",
    host: str = "127.0.0.1",
    port: int | None = None,
) -> Iterator[LiveService]:
    """Start gunicorn (and a Celery worker) with ``env``; stop them on exit.

    ``gunicorn_args`` are added to gunicorn's command line, where they take
    precedence over config/gunicorn.py (``--worker-class sync``); ``app`` is
    the WSGI application (the bench serves one of its own). gunicorn
    listens on ``host`` (another loopback address, 127.0.0.2, stands for
    another machine) and ``port``, a free one unless given.
    """
    port = port or free_port()
    env = {**env, "BIND": f"{host}:{port}", "WEB_CONCURRENCY": str(web_workers)}
    processes = [
        subprocess.Popen(
            [
                str(BIN / "gunicorn"),
                "-c",
                "config/gunicorn.py",
                *gunicorn_args,
                app,
            ],
            cwd=ROOT,
            env=env,
        )
    ]
    if celery:
        processes.append(subprocess.Popen(celery_worker_command(), cwd=ROOT, env=env))
    try:
        service = LiveService(base_url=f"http://{host}:{port}")
        wait_until_healthy(service, processes)
        yield service
    finally:
        stop(processes)


def celery_worker_command(name: str | None = None) -> list[str]:
    """A Celery worker as the tests run it: one process (solo), named ``name@host`` if given."""
    command = [str(BIN / "celery"), "-A", "config", "worker", "--pool=solo", "--loglevel=WARNING"]
    return [*command, "-n", f"{name}@%h"] if name else command


def wait_until_healthy(
    service: LiveService, processes: Sequence[subprocess.Popen[Any]], *, within_s: float = 30
) -> None:
    """Until the service answers ``/healthz``; fails at once if one of ``processes`` exits."""
    wait_until_answering(service.url("/healthz"), processes, within_s=within_s)


def wait_until_answering(
    url: str, processes: Sequence[subprocess.Popen[Any]], *, within_s: float = 30
) -> None:
    """Until ``url`` answers ``200``; fails at once if one of ``processes`` exits."""
    # The port opens when the server is ready; there is no event to wait on.
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in processes), "a service process exited"
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer")


def stop(processes: Sequence[subprocess.Popen[Any]]) -> None:
    """SIGTERM to each, then each waited for; one still running after 20 s is killed."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def base_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    # Workers serve no metrics unless a test asks: several at once would
    # contend for the one default port.
    env["WORKER_METRICS_PORT"] = "0"
    env.update(overrides)
    return env


def suite_database_url() -> str:
    """The URL of the suite's database (pytest-django's), for processes started by a test."""
    from django.db import connection

    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def suite_database_env(**overrides: str) -> dict[str, str]:
    """A service process's environment on the suite's database, signing as the tests do."""
    from django.conf import settings

    return base_env(DATABASE_URL=suite_database_url(), SECRET_KEY=settings.SECRET_KEY, **overrides)


@contextmanager
def serve_with_worker(var_dir: Path) -> Iterator[LiveService]:
    """gunicorn (two workers) and a Celery worker on the suite's database and broker.

    The queue is emptied first: messages of earlier runs name operations
    that no longer exist.
    """
    from django.conf import settings

    from config.celery import app

    env = suite_database_env(
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL, VAR_DIR=str(var_dir), DEBUG="0"
    )
    app.control.purge()
    with serve(env, web_workers=2, celery=True) as service:
        yield service
