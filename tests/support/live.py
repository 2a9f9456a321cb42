"""The service as deployed: gunicorn (and a Celery worker) in their own processes.

Each logs to a file of its own (tests/support/servers.py), which a failed
test shows the end of.
"""

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.support import servers
from tests.support.waits import Answer, describe, http_answer, wait_for, wait_until

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
    ended = operation_ended(operation, {"Authorization": f"Bearer {token}"})
    assert ended["status"] == "succeeded", ended
    return str(accepted.json()["paymentId"])


def operation_ended(
    url: str, headers: Mapping[str, str], *, within_s: float = 30
) -> dict[str, Any]:
    """Poll the operation at ``url`` as a client does until it leaves ``processing``; its body.

    A client would wait ``Retry-After`` (a second); a worker takes a message
    at once, so a tenth of that keeps a test short.
    """

    def read() -> dict[str, Any]:
        response = requests.get(url, headers=dict(headers), timeout=10)
        assert response.status_code == 200, describe(response)
        operation: dict[str, Any] = response.json()
        return operation

    return wait_for(
        read,
        lambda operation: operation["status"] != "processing",
        within_s,
        interval=0.1,
        what=f"the operation {url} ending",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def manage(*args: str, env: Mapping[str, str]) -> str:
    """Run ``manage.py`` in its own process; returns its stdout, or fails with all it printed."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, (
        f"manage.py {' '.join(args)} exited with status {result.returncode}:\n"
        f"{result.stdout}{result.stderr}"
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
    with servers.workspace("serve-") as logs:
        processes = [
            servers.start(
                "gunicorn",
                [str(BIN / "gunicorn"), "-c", "config/gunicorn.py", *gunicorn_args, app],
                log=logs / "gunicorn.log",
                cwd=ROOT,
                env=env,
            )
        ]
        try:
            if celery:
                processes.append(
                    servers.start(
                        "celery worker",
                        celery_worker_command(),
                        log=logs / "celery-worker.log",
                        cwd=ROOT,
                        env=env,
                    )
                )
            service = LiveService(base_url=f"http://{host}:{port}")
            wait_until_healthy(service, processes)
            yield service
        finally:
            servers.stop(processes)


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

    def answering() -> Answer:
        exited = [p for p in processes if p.poll() is not None]
        assert not exited, f"a process exited before {url} answered\n{servers.evidence()}"
        return http_answer(url, timeout=5)

    # The port opens when the server is ready; there is no event to wait on.
    wait_until(answering, within_s, interval=0.05, what=f"{url} answering 200")


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
