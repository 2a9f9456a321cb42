"""``gunicorn config.wsgi:application -w 4``, with no other option, is a correct deployment.

docs/SPECIFICATION.md §1 promises it: metrics and the rate limit hold across the
worker processes. gunicorn reads ./gunicorn.conf.py by itself, which loads
config/gunicorn.py: the metrics directory that the workers share, and the
hook that removes it. The rate limit is counted in the database.

Each request goes on a connection of its own (``Connection: close``), many
at once, so that they land on different workers; the metrics files the
workers write show which worker served how many.
"""

import json
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

from api.models import RateLimitWindow
from tests.support import servers
from tests.support.http import ORDER, Api
from tests.support.live import (
    BIN,
    ROOT,
    LiveService,
    free_port,
    suite_database_env,
    wait_until_healthy,
)
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# The whole command line: no -c, no other option.
WORKERS = 4
PLAIN_GUNICORN = [str(BIN / "gunicorn"), "config.wsgi:application", "-w", str(WORKERS)]

Sample = tuple[str, frozenset[tuple[str, str]]]


def sample(name: str, **labels: str) -> Sample:
    return name, frozenset(labels.items())


EXECUTED = sample("idempotency_outcomes_total", command="POST /v1/orders", outcome="executed")
LISTED = sample("http_requests_total", method="GET", route="/v1/orders", status="200")
THROTTLED = sample("http_requests_total", method="GET", route="/v1/orders", status="429")


@contextmanager
def plain_gunicorn(env: dict[str, str], tmp_path: Path) -> Iterator[LiveService]:
    """The plain command, in the project's directory, as docs/DEPLOYING.md runs it.

    Only the environment is the test's: the suite's database, a free port
    (config/gunicorn.py reads ``BIND``), and ``TMPDIR`` so that the metrics
    directory gunicorn makes is found under ``tmp_path``.
    """
    port = free_port()
    server = servers.start(
        "gunicorn",
        PLAIN_GUNICORN,
        log=tmp_path / "gunicorn.log",
        cwd=ROOT,
        env={**env, "BIND": f"127.0.0.1:{port}", "TMPDIR": str(tmp_path)},
    )
    try:
        service = LiveService(base_url=f"http://127.0.0.1:{port}")
        wait_until_healthy(service, [server])
        _wait_until_every_worker_serves(service, tmp_path)
        yield service
    finally:
        servers.stop([server])


def _wait_until_every_worker_serves(service: LiveService, tmp_path: Path) -> None:
    def served() -> dict[int, float]:
        in_parallel(16, lambda _: requests.get(service.url("/healthz"), timeout=5))
        return per_worker(tmp_path, "http_requests_total", route="/healthz")

    # The first worker to load the app answers /healthz while the others
    # may still be loading it; until they all serve, one worker would take
    # every request.
    wait_for(
        served,
        lambda by_pid: len(by_pid) >= WORKERS,
        30,
        interval=0,
        what=f"each of the {WORKERS} workers serving a request (requests by pid)",
    )


def in_parallel(n: int, request: Callable[[int], requests.Response]) -> list[requests.Response]:
    """``request(i)`` for i < n, 16 at a time, each on a connection of its own."""
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(request, range(n)))


def post_orders(service: LiveService, token: str, keys: list[str]) -> list[requests.Response]:
    def post(i: int) -> requests.Response:
        return requests.post(
            service.url("/v1/orders"),
            data=json.dumps(ORDER),
            headers={
                "Authorization": f"Bearer {token}",
                "Idempotency-Key": keys[i],
                "Content-Type": "application/json",
                "Connection": "close",
            },
            timeout=30,
        )

    return in_parallel(len(keys), post)


def list_orders(service: LiveService, token: str, n: int) -> list[requests.Response]:
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    return in_parallel(
        n, lambda _: requests.get(service.url("/v1/orders"), headers=headers, timeout=30)
    )


def scrape(service: LiveService) -> dict[Sample, float]:
    """One ``/metrics`` answer, from whichever worker accepts a new connection."""
    response = requests.get(service.url("/metrics"), headers={"Connection": "close"}, timeout=10)
    assert response.status_code == 200
    return {
        sample(found.name, **found.labels): float(found.value)
        for family in text_string_to_metric_families(response.text)
        for found in family.samples
    }


def per_worker(tmp_path: Path, name: str, **labels: str) -> dict[int, float]:
    """What each worker process counted, by pid, of the samples with these labels (and others).

    Read from the files the workers write in the metrics directory.
    """
    (metrics_dir,) = tmp_path.glob("order-service-metrics-*")
    counts: Counter[int] = Counter()
    for path in metrics_dir.glob("counter_*.db"):
        for key, value, _, _ in MmapedDict.read_all_values_from_file(str(path)):
            _, found_name, found_labels, _ = json.loads(key)
            if found_name == name and labels.items() <= found_labels.items() and value:
                counts[int(path.stem.removeprefix("counter_"))] += value
    return dict(counts)


def test_every_scrape_adds_up_every_worker(api: Api, tmp_path: Path) -> None:
    made = 0
    scraped: list[float] = []
    with plain_gunicorn(suite_database_env(), tmp_path) as service:
        for batch in range(3):
            answers = post_orders(service, api.token, [f"b{batch}-{i}" for i in range(16)])
            assert [r.status_code for r in answers] == [201] * 16
            made += 16
            scraped += [scrape(service)[EXECUTED] for _ in range(4)]
            assert scraped[-4:] == [made] * 4
        served = per_worker(tmp_path, "idempotency_outcomes_total", outcome="executed")

    # Never backwards, and always the whole server: with per-process
    # counters, each scrape would show only the count of its own worker.
    assert scraped == sorted(scraped)
    assert scraped[-1] == made == 48
    assert len(served) >= 2, served
    assert sum(served.values()) == made
    # gunicorn ran config/gunicorn.py's on_exit hook: the directory is gone.
    assert not list(tmp_path.glob("order-service-metrics-*"))


def test_the_rate_limit_is_one_for_every_worker(api: Api, tmp_path: Path) -> None:
    # Per day, so that the burst falls in one window (a window boundary
    # would let a second limit through).
    env = suite_database_env(API_THROTTLE_RATE="10/day")
    with plain_gunicorn(env, tmp_path) as service:
        answers = list_orders(service, api.token, 40)
        scrapes = [scrape(service) for _ in range(4)]
        served = per_worker(tmp_path, "http_requests_total", route="/v1/orders")

    assert Counter(r.status_code for r in answers) == {200: 10, 429: 30}
    for refused in (r for r in answers if r.status_code == 429):
        assert refused.headers["Content-Type"] == "application/problem+json"
        assert refused.json()["error"] == "Throttled"
        assert 0 < int(refused.headers["Retry-After"]) <= 86400
    assert [(s[LISTED], s[THROTTLED]) for s in scrapes] == [(10.0, 30.0)] * 4
    assert len(served) >= 2, served
    assert sum(served.values()) == 40
    # One counter for the principal, which every worker added to.
    (window,) = RateLimitWindow.objects.filter(ident=f"principal:{api.principal.pk}")
    assert window.hits == 40
