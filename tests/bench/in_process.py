"""What the guard costs in CPU, measured in one process, where the machine's drift cancels out.

Through gunicorn and wrk, throughput drifts with the machine by tens of
percent over seconds (docs/SCALING.md), more than the guard costs. Here
the service's WSGI application (the bench's, tests/bench/wsgi.py) is called
directly, with no HTTP server, alternating a guarded first execution of
``POST /v1/orders`` and the same request to the unguarded view request by
request, and reading around each one the CPU of this process (Python) and
of its PostgreSQL backend (``/proc/<pid>/schedstat``, in nanoseconds). A
slow stretch of the machine then falls on both kinds alike. The ratio
leaves out what both pay equally through an HTTP server (gunicorn's
parsing, the sockets), so it is lower than the throughput's would be on a
quiet machine: it is the guard's cost against the command's own.
"""

import io
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GuardCpu:
    """Median CPU per request, in ms, of each kind, and of the pairs' ratios."""

    guarded_python_ms: float
    guarded_postgres_ms: float
    unguarded_python_ms: float
    unguarded_postgres_ms: float
    # CPU of the unguarded request over the guarded one, per round of pairs.
    ratios: list[float]
    python_ratios: list[float]


def measure(env: Mapping[str, str], token: str, body: Any, *, pairs: int = 2000) -> GuardCpu:
    """``pairs`` guarded and unguarded creates, alternating, in ten rounds.

    ``env`` is the served service's (its database, its secret key): the
    settings are read once, when the application is built here.
    """
    os.environ.update(env)
    from django.db import connection

    from tests.bench.wsgi import application

    raw = json.dumps(body).encode()

    def post(path: str, key: str | None) -> None:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "HTTP_HOST": "127.0.0.1:8000",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(raw)),
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "wsgi.input": io.BytesIO(raw),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            **({"HTTP_IDEMPOTENCY_KEY": key} if key else {}),
        }
        statuses: list[str] = []
        answer = application(environ, lambda status, headers, *_: statuses.append(status))
        b"".join(answer)
        assert statuses[0].startswith("201"), statuses[0]

    kinds: dict[str, Callable[[], None]] = {
        "guarded": lambda: post("/v1/orders", uuid.uuid4().hex),
        "unguarded": lambda: post("/bench/unguarded/orders", None),
    }
    for _ in range(100):  # warm up code paths, caches and the connection
        for send in kinds.values():
            send()

    def backend_seconds() -> float:
        pid = connection.connection.info.backend_pid
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9

    rounds, per_round = 10, max(1, pairs // 10)
    per_kind: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
    for _ in range(rounds):
        spent = {name: [0.0, 0.0] for name in kinds}
        for i in range(per_round):
            for name in list(kinds) if i % 2 == 0 else list(kinds)[::-1]:
                python, postgres = time.process_time(), backend_seconds()
                kinds[name]()
                spent[name][0] += time.process_time() - python
                spent[name][1] += backend_seconds() - postgres
        for name, (python, postgres) in spent.items():
            per_kind[name].append((python * 1000 / per_round, postgres * 1000 / per_round))
    rounds_of_both = list(zip(per_kind["guarded"], per_kind["unguarded"], strict=True))
    return GuardCpu(
        guarded_python_ms=statistics.median(p for p, _ in per_kind["guarded"]),
        guarded_postgres_ms=statistics.median(q for _, q in per_kind["guarded"]),
        unguarded_python_ms=statistics.median(p for p, _ in per_kind["unguarded"]),
        unguarded_postgres_ms=statistics.median(q for _, q in per_kind["unguarded"]),
        ratios=[sum(u) / sum(g) for g, u in rounds_of_both],
        python_ratios=[u[0] / g[0] for g, u in rounds_of_both],
    )
