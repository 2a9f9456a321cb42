"""What the protocol costs in CPU, measured in one process, where the machine's drift cancels out.

Through gunicorn and wrk, throughput drifts with the machine by tens of
percent over seconds (docs/SCALING.md), more than the protocol costs. Here
the service's WSGI application (the bench's, tests/bench/wsgi.py) is called
directly, with no HTTP server, alternating an idempotent first execution of
``POST /v1/orders``, the same request to the bare view, and the plain
view's (tests/bench/plain_view.py: the ceiling's statements and nothing
else) request by request, and reading around each one the CPU of this
process (Python) and of its PostgreSQL backend (``/proc/<pid>/schedstat``,
in nanoseconds). A slow stretch of the machine then falls on all three
alike. The ratios leave out what all pay equally through an HTTP server
(gunicorn's parsing, the sockets), so they are lower than the throughput's
would be on a quiet machine: bare over idempotent is the protocol's cost
against the command's own; plain view over idempotent, how much of a
create the stack's floor is, which through gunicorn only a drifting
throughput shows.

The same way, :func:`measure_lists` reads what a page of ``GET /v1/orders``
costs by the size of its orders: a page of 200 orders of one line each
against one of 100 lines each, alternating, and what the biggest page
leaves allocated in the process.
"""

import importlib
import io
import json
import os
import statistics
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GuardCpu:
    """Median CPU per request, in ms, of each kind, and of the rounds' ratios."""

    idempotent_python_ms: float
    idempotent_postgres_ms: float
    bare_python_ms: float
    bare_postgres_ms: float
    plain_python_ms: float
    plain_postgres_ms: float
    # CPU of the bare request over the idempotent one, per round.
    ratios: list[float]
    python_ratios: list[float]
    # CPU of the plain view's request over the idempotent one, per round.
    plain_ratios: list[float]


def measure(env: Mapping[str, str], token: str, body: Any, *, pairs: int = 2000) -> GuardCpu:
    """``pairs`` creates of each kind (idempotent, bare, plain), alternating, in ten rounds.

    ``env`` is the served service's (its database, its secret key): the
    settings are read once, when the application is built here.
    """
    _settle(env)
    from django.db import connection

    from tests.bench.wsgi import application

    raw = json.dumps(body).encode()

    def post(path: str, key: str | None) -> None:
        extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        status, _ = _call(application, token, "POST", path, raw=raw, **extra)
        assert status.startswith("201"), status

    kinds: dict[str, Callable[[], None]] = {
        "idempotent": lambda: post("/v1/orders", uuid.uuid4().hex),
        "bare": lambda: post("/bench/bare/orders", None),
        "plain": lambda: post("/bench/plain/orders", None),
    }
    for _ in range(100):  # warm up code paths, caches and the connection
        for send in kinds.values():
            send()

    rounds, per_round = 10, max(1, pairs // 10)
    per_kind: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
    for _ in range(rounds):
        spent = {name: [0.0, 0.0] for name in kinds}
        for i in range(per_round):
            for name in list(kinds) if i % 2 == 0 else list(kinds)[::-1]:
                python, postgres = time.process_time(), _backend_seconds(connection)
                kinds[name]()
                spent[name][0] += time.process_time() - python
                spent[name][1] += _backend_seconds(connection) - postgres
        for name, (python, postgres) in spent.items():
            per_kind[name].append((python * 1000 / per_round, postgres * 1000 / per_round))
    rounds_of_both = list(zip(per_kind["idempotent"], per_kind["bare"], strict=True))
    plain_rounds = list(zip(per_kind["idempotent"], per_kind["plain"], strict=True))
    return GuardCpu(
        idempotent_python_ms=statistics.median(p for p, _ in per_kind["idempotent"]),
        idempotent_postgres_ms=statistics.median(q for _, q in per_kind["idempotent"]),
        bare_python_ms=statistics.median(p for p, _ in per_kind["bare"]),
        bare_postgres_ms=statistics.median(q for _, q in per_kind["bare"]),
        plain_python_ms=statistics.median(p for p, _ in per_kind["plain"]),
        plain_postgres_ms=statistics.median(q for _, q in per_kind["plain"]),
        ratios=[sum(u) / sum(g) for g, u in rounds_of_both],
        python_ratios=[u[0] / g[0] for g, u in rounds_of_both],
        plain_ratios=[sum(u) / sum(g) for g, u in plain_rounds],
    )


def _settle(env: Mapping[str, str]) -> None:
    """The served service's settings for this process, read when the application is built.

    One database connection for the whole measure: with the deployed
    CONN_MAX_AGE (60 s), Django would replace it midway, and its PostgreSQL
    backend, whose CPU is read around each request, with it.
    """
    os.environ.update({**env, "CONN_MAX_AGE": "86400"})


def _call(
    application: Any, token: str, method: str, path: str, *, raw: bytes = b"", **extra: str
) -> tuple[str, bytes]:
    """One request to the WSGI application, as gunicorn would hand it over."""
    path, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
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
        **extra,
    }
    statuses: list[str] = []
    answer = application(environ, lambda status, headers, *_: statuses.append(status))
    return statuses[0], b"".join(answer)


def _backend_seconds(connection: Any) -> float:
    pid = connection.connection.info.backend_pid
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


# What every request pays besides its own work, each measured by turning it
# off and on (tests/bench/in_process.py, :func:`measure_fixed_costs`).
FIXED_COSTS = {
    "log": "the request's log line (LOG_LEVEL=INFO; the bench serves at WARNING)",
    "metrics": "its metrics (HTTP counter and histogram, the command's outcome and duration)",
    "health_check": "the database health check (CONN_HEALTH_CHECKS: a SELECT 1 per request)",
}


def measure_fixed_costs(
    env: Mapping[str, str], token: str, body: Any, *, rounds: int = 10, per_round: int = 200
) -> dict[str, list[float]]:
    """CPU per request (µs, process and its backend) of each of ``FIXED_COSTS``, per round.

    Each is measured on replays of one ``POST /v1/orders``, the cheapest
    command: requests with the part on and off alternate, and a round's
    figure is the difference of their means. The log line is written to
    /dev/null, where a deployment writes it to a pipe or a file.
    """
    _settle(env)
    import logging

    from django.db import connection

    from tests.bench.wsgi import application

    # Imported once the application has set Django up.
    middleware: Any = importlib.import_module("api.middleware")
    commands: Any = importlib.import_module("idempotency.commands")

    raw = json.dumps(body).encode()

    def replay() -> None:
        status, _ = _call(
            application, token, "POST", "/v1/orders", raw=raw, HTTP_IDEMPOTENCY_KEY="fixed-costs"
        )
        assert status.startswith("201"), status

    request_log, real_logger = logging.getLogger("order_service.request"), middleware.logger
    real_metrics = {
        module: {name: getattr(module, name) for name in names}
        for module, names in [
            (middleware, ("HTTP_REQUESTS", "HTTP_DURATION")),
            (commands, ("IDEMPOTENCY_OUTCOMES", "COMMAND_DURATION")),
        ]
    }

    def metrics(on: bool) -> None:
        for module, names in real_metrics.items():
            for name, metric in names.items():
                setattr(module, name, metric if on else _Silent())

    def log(on: bool) -> None:
        request_log.setLevel(logging.INFO)
        middleware.logger = real_logger if on else _Silent()

    def health_check(on: bool) -> None:
        connection.health_check_enabled = on  # type: ignore[attr-defined]

    switches: dict[str, Callable[[bool], None]] = {
        "log": log,
        "metrics": metrics,
        "health_check": health_check,
    }
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    streams = [(h, h.setStream(open(os.devnull, "w"))) for h in handlers]  # noqa: SIM115
    try:
        replay()
        costs: dict[str, list[float]] = {name: [] for name in switches}
        for name, switch in switches.items():
            for _ in range(rounds):
                spent = {True: 0.0, False: 0.0}
                for i in range(per_round):
                    for on in (True, False) if i % 2 == 0 else (False, True):
                        switch(on)
                        python, postgres = time.process_time(), _backend_seconds(connection)
                        replay()
                        spent[on] += time.process_time() - python
                        spent[on] += _backend_seconds(connection) - postgres
                costs[name].append((spent[True] - spent[False]) * 1e6 / per_round)
            switch(True)
        return costs
    finally:
        request_log.setLevel(logging.NOTSET)
        for handler, stream in streams:
            if stream is not None and (devnull := handler.setStream(stream)) is not None:
                devnull.close()


class _Silent:
    """A metric or a logger that records nothing, in place of one being measured."""

    def labels(self, *_: Any) -> "_Silent":
        return self

    def inc(self, *_: Any) -> None:
        pass

    def observe(self, *_: Any) -> None:
        pass

    def info(self, *_: Any, **__: Any) -> None:
        pass


# The shapes of the list's pages: orders of one line, and of the most
# lines an order may have (orders.serializers.MAX_ITEMS).
LIST_SHAPES = (1, 100)
LIST_PAGE = "/v1/orders?pageSize=200"


@dataclass(frozen=True)
class ListCpu:
    """What a page of 200 orders costs, by the lines of its orders (``LIST_SHAPES``)."""

    # Median CPU per page, in ms, and the page's size in bytes, per shape.
    python_ms: dict[int, float]
    postgres_ms: dict[int, float]
    page_bytes: dict[int, int]
    # CPU of the page of the most lines over that of the fewest, per round.
    ratios: list[float]
    # The peak of Python's allocations while one page is answered (tracemalloc),
    # per shape, in MB.
    peak_mb: dict[int, float]
    # The resident set of this process (/proc/self/statm), in MB: before the
    # rounds, and after their ``pages`` pages one after the other.
    rss_before_mb: float
    rss_after_mb: float
    pages: int
    # Then pages of the most lines from ``THREADS`` threads at once, as a
    # gunicorn worker's threads serve them: the resident set at its highest
    # and after the threads end.
    rss_threads_peak_mb: float
    rss_threads_after_mb: float


# gunicorn's threads per worker (config/gunicorn.py, WEB_THREADS).
THREADS = 8


def measure_lists(env: Mapping[str, str], *, rounds: int = 10, per_round: int = 5) -> ListCpu:
    """Pages of 200 orders of each shape, alternating, ``per_round`` of each in ``rounds``.

    Each shape is a tenant of its own with 200 orders, placed here through
    the service. ``env`` is as for :func:`measure`.
    """
    _settle(env)
    from django.db import connection

    from tests.bench.wsgi import application

    tokens = {lines: _tenant_with_orders(lines, count=200) for lines in LIST_SHAPES}

    def page(lines: int) -> bytes:
        status, body = _call(application, tokens[lines], "GET", LIST_PAGE)
        assert status.startswith("200"), status
        return body

    page_bytes = {lines: len(page(lines)) for lines in LIST_SHAPES}
    for _ in range(3):  # warm up code paths, caches and the connection
        for lines in LIST_SHAPES:
            page(lines)
    rss_before = _rss_mb()

    per_shape: dict[int, list[tuple[float, float]]] = {lines: [] for lines in LIST_SHAPES}
    for _ in range(rounds):
        spent = {lines: [0.0, 0.0] for lines in LIST_SHAPES}
        for i in range(per_round):
            for lines in LIST_SHAPES if i % 2 == 0 else LIST_SHAPES[::-1]:
                python, postgres = time.process_time(), _backend_seconds(connection)
                page(lines)
                spent[lines][0] += time.process_time() - python
                spent[lines][1] += _backend_seconds(connection) - postgres
        for lines, (python, postgres) in spent.items():
            per_shape[lines].append((python * 1000 / per_round, postgres * 1000 / per_round))
    rss_after = _rss_mb()

    fewest, most = min(LIST_SHAPES), max(LIST_SHAPES)
    return ListCpu(
        python_ms={lines: statistics.median(p for p, _ in ms) for lines, ms in per_shape.items()},
        postgres_ms={lines: statistics.median(q for _, q in ms) for lines, ms in per_shape.items()},
        page_bytes=page_bytes,
        ratios=[sum(m) / sum(f) for f, m in zip(per_shape[fewest], per_shape[most], strict=True)],
        peak_mb={lines: _peak_mb(page, lines) for lines in LIST_SHAPES},
        rss_before_mb=rss_before,
        rss_after_mb=rss_after,
        pages=rounds * per_round * len(LIST_SHAPES),
        rss_threads_peak_mb=_peak_rss_mb(_from_threads, page, most),
        rss_threads_after_mb=_rss_mb(),
    )


def _tenant_with_orders(lines: int, *, count: int) -> str:
    """A tenant of its own with ``count`` orders of ``lines`` lines; its client's token."""
    from accounts.services import create_api_client
    from orders.inputs import NewOrder, OrderLine
    from orders.services import create_order

    issued = create_api_client(tenant_slug=f"bench-lists-{lines}", name="bench")
    items = [OrderLine(sku="ABC" if i % 2 else "XYZ", qty=i + 1) for i in range(lines)]
    for i in range(count):
        create_order(
            tenant=issued.principal.tenant,
            new_order=NewOrder(customer_id=f"bench-{i}", currency="RUB", items=items),
        )
    return issued.token


def _peak_mb(call: Callable[..., Any], *args: Any) -> float:
    tracemalloc.start()
    try:
        call(*args)
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def _from_threads(page: Callable[[int], bytes], lines: int, *, each: int = 3) -> None:
    from django.db import connections

    def serve() -> None:
        for _ in range(each):
            page(lines)
        connections.close_all()  # this thread's

    threads = [threading.Thread(target=serve) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _peak_rss_mb(call: Callable[..., Any], *args: Any) -> float:
    """The highest resident set of this process while ``call`` runs, sampled every 10 ms."""
    peak, done = _rss_mb(), threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.01):
            peak = max(peak, _rss_mb())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        call(*args)
    finally:
        done.set()
        sampler.join()
    return max(peak, _rss_mb())


def _rss_mb() -> float:
    resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 1e6
