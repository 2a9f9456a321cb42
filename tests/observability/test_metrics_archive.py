"""Dead workers' metrics folded into the archive (observability/metrics_archive.py).

The contract (§5): counts survive the end of a worker, whatever ended it,
and what the metrics keep does not grow with worker restarts. First the
fold on files written as prometheus_client writes them; then gunicorn as
deployed, its workers recycled every few requests and some killed, the
counts at ``/metrics`` held to every answer and the directory to its size.
"""

import fcntl
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from observability import metrics_archive
from tests.support.live import ROOT, LiveService, serve, suite_database_env
from tests.support.waits import wait_for
from tests.support.workers import Gunicorn, metrics_files, pid_file_args

Series = tuple[str, frozenset[tuple[str, str]]]


def write(
    directory: Path, kind: str, pid: int, sample: str, label: str, values: dict[str, float]
) -> None:
    """A dead process's file, as prometheus_client's MmapedValue writes it: a value per label."""
    metric = sample.removesuffix("_total").removesuffix("_bucket")
    mapped = MmapedDict(str(directory / f"{kind}_{pid}.db"))
    for label_value, value in values.items():
        mapped.write_value(mmap_key(metric, sample, [label], [label_value], "help"), value, 0.0)
    mapped.close()


def collected(directory: Path) -> dict[Series, float]:
    """What a scrape shows of ``directory``, by series."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in MultiProcessCollector(None, path=str(directory)).collect()
        for sample in family.samples
    }


def test_a_fold_keeps_every_count_in_one_archive_per_type(tmp_path: Path) -> None:
    for pid, hits in ((101, 3.0), (102, 5.0), (103, 7.0)):
        write(tmp_path, "counter", pid, "hits_total", "route", {"/a": hits, "/b": 1.0})
        write(tmp_path, "histogram", pid, "seconds_bucket", "le", {"0.1": hits, "+Inf": 1.0})
    before = collected(tmp_path)

    for pid in (101, 102):
        assert metrics_archive.fold_dead_worker(pid, str(tmp_path))

    assert collected(tmp_path) == before
    assert before[("hits_total", frozenset({("route", "/a")}))] == 15.0
    assert sorted(p.name for p in tmp_path.glob("*.db")) == [
        "counter_103.db",
        "counter_archive.db",
        "histogram_103.db",
        "histogram_archive.db",
    ]


def test_gauges_join_the_archive_by_their_mode_and_live_ones_leave(tmp_path: Path) -> None:
    for pid, value in ((201, 4.0), (202, 9.0)):
        for mode in ("sum", "min", "max", "livesum", "all"):
            write(tmp_path, f"gauge_{mode}", pid, mode, "route", {"/a": value})

    for pid in (201, 202):
        metrics_archive.fold_dead_worker(pid, str(tmp_path))

    assert collected(tmp_path) == {
        ("sum", frozenset({("route", "/a")})): 13.0,
        ("min", frozenset({("route", "/a")})): 4.0,
        ("max", frozenset({("route", "/a")})): 9.0,
    }
    assert sorted(p.name for p in tmp_path.glob("*.db")) == [
        "gauge_max_archive.db",
        "gauge_min_archive.db",
        "gauge_sum_archive.db",
    ]


def test_a_fold_waits_for_the_scrape_in_progress_and_is_put_off_past_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_archive, "LOCK_WAIT_S", 0.05)
    write(tmp_path, "counter", 301, "hits_total", "route", {"/a": 2.0})
    write(tmp_path, "counter", 302, "hits_total", "route", {"/a": 3.0})
    before = collected(tmp_path)

    with open(tmp_path / metrics_archive.LOCK_FILE, "a") as scrape:  # a scrape holds it shared
        fcntl.flock(scrape, fcntl.LOCK_SH)
        put_off = metrics_archive.fold_dead_worker(301, str(tmp_path))
        untouched = sorted(p.name for p in tmp_path.glob("*.db"))
    folded = metrics_archive.fold_dead_worker(302, str(tmp_path))

    assert not put_off
    assert untouched == ["counter_301.db", "counter_302.db"]
    assert folded
    # The one put off was folded with the next.
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["counter_archive.db"]
    assert collected(tmp_path) == before


def test_a_scrape_passes_over_the_empty_file_of_a_process_starting(tmp_path: Path) -> None:
    write(tmp_path, "counter", 401, "hits_total", "route", {"/a": 2.0})
    # MmapedDict creates the file empty, then gives it its size.
    (tmp_path / "counter_402.db").touch()

    families = list(metrics_archive.ConsistentCollector(None, path=str(tmp_path)).collect())

    assert [(s.name, s.value) for f in families for s in f.samples] == [("hits_total", 2.0)]


def test_the_archive_module_loads_without_django(tmp_path: Path) -> None:
    # gunicorn's master imports it in child_exit; it must stay free of the app.
    check = (
        "import sys; from observability import metrics_archive;"
        "assert not [n for n in sys.modules if n.split('.')[0] == 'django'], 'django'"
    )
    result = subprocess.run(
        [sys.executable, "-c", check],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )

    assert result.returncode == 0, result.stderr


# With gunicorn: each worker ends after this many requests, so that a few
# hundred requests make tens of restarts. Each restart loads Django anew
# (some 0.7 s of CPU), which is what bounds the number here.
MAX_REQUESTS = 10
# Up to 5 more, so that the two workers seldom end together.
JITTER = 5
# Every fifth restart is a SIGKILL rather than a recycling.
KILL_EVERY = 5
# A request may wait for a worker to load Django (both may be loading on
# a busy machine of two cores): long, but the test is of counts, not of
# latency.
TIMEOUT_S = 60
EARLY, LATE = 10, 30


class Scraper:
    """Scrapes ``/metrics`` in a loop, in a thread of its own, while the test restarts workers.

    ``paused()`` holds it between two scrapes, so that no scrape is in
    flight when the test kills a worker (a scrape lost with its worker
    would make the count of answers uncertain).
    """

    def __init__(self, service: LiveService) -> None:
        self.service = service
        self.scrapes: list[dict[Series, float]] = []
        self.answered = 0
        self.failure: BaseException | None = None
        self._turn = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._turn:
                    self.scrapes.append(http_requests(self.service))
                    self.answered += 1
        except BaseException as failed:  # raised again in the test's thread
            self.failure = failed

    @contextmanager
    def running(self) -> Iterator["Scraper"]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
        if self.failure is not None:
            raise self.failure

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._turn:
            yield


def http_requests(service: LiveService) -> dict[Series, float]:
    """The ``http_requests_total`` series of one scrape, on a connection of its own."""
    response = requests.get(
        service.url("/metrics"), headers={"Connection": "close"}, timeout=TIMEOUT_S
    )
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        if family.name == "http_requests"
        for sample in family.samples
        if sample.name == "http_requests_total"
    }


@pytest.mark.django_db(transaction=True)
def test_counts_are_exact_and_the_directory_flat_across_worker_restarts(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    pid_file = tmp_path / "gunicorn.pid"
    env = suite_database_env(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir))
    args = [
        *pid_file_args(pid_file),
        f"--max-requests={MAX_REQUESTS}",
        f"--max-requests-jitter={JITTER}",
    ]
    sizes: dict[int, tuple[list[str], int]] = {}

    with serve(env, web_workers=2, gunicorn_args=args) as service:
        server = Gunicorn.from_pid_file(pid_file)
        driver = Driver(service, server, metrics_dir)
        with Scraper(service).running() as scraper:
            for target in (EARLY, LATE):
                driver.restart_until(target, scraper)
                # Paused, and the driver idle: no worker ends meanwhile.
                with scraper.paused():
                    sizes[target] = driver.files_of_the_dead()
                total = metrics_files(metrics_dir)
        final = http_requests(service)

    # Every answer counted once, by its route: the driver's (no route, 404)
    # and the scraper's. Not /healthz, which serve() also asks for until the
    # server is up, one request perhaps timed out and answered later.
    assert counted(final, "unmatched") == driver.answered
    assert counted(final, "/metrics") == scraper.answered
    # Each series only ever grows, scrape after scrape, while workers restart.
    for earlier, later in zip(scraper.scrapes, scraper.scrapes[1:], strict=False):
        assert all(later.get(series, 0) >= value for series, value in earlier.items())
    assert len(scraper.scrapes) > LATE
    assert driver.killed >= LATE // KILL_EVERY
    # Of the dead workers, the two archives alone, of the same size after 10
    # restarts as after 30 (without the archive: 2 files of 64 KiB more a
    # restart); beside them, the live workers' two files each at most.
    assert sizes[EARLY] == sizes[LATE]
    assert sizes[LATE][0] == ["counter_archive.db", "histogram_archive.db"]
    assert total[0] <= 2 * 2 + 2


def counted(scrape: dict[Series, float], route: str) -> float:
    return sum(value for (_, labels), value in scrape.items() if ("route", route) in labels)


class Driver:
    """Restarts workers: requests until ``max_requests`` recycles one, or a SIGKILL.

    Its requests are for a page that does not exist: answered 404, with
    neither the database nor a route (``route="unmatched"``).
    """

    def __init__(self, service: LiveService, server: Gunicorn, metrics_dir: Path) -> None:
        self.service = service
        self.server = server
        self.metrics_dir = metrics_dir
        self.seen = server.workers()
        self.restarts = 0
        self.killed = 0
        self.answered = 0

    def get(self) -> None:
        response = requests.get(
            self.service.url("/no-such-page"), headers={"Connection": "close"}, timeout=TIMEOUT_S
        )
        assert response.status_code == 404
        self.answered += 1

    def restart_until(self, restarts: int, scraper: Scraper) -> None:
        """At least ``restarts`` restarts, every ``KILL_EVERY``-th of them a SIGKILL.

        Counted by kills owed, not by the restart's number: both workers
        may be recycled by one round of requests, and a number skipped.
        """
        while self.restarts < restarts or self.killed < restarts // KILL_EVERY:
            if self.killed < (self.restarts + 1) // KILL_EVERY:
                self.kill_one(scraper)
            else:
                self.get()
            self._count_new_workers()

    def kill_one(self, scraper: Scraper) -> None:
        with scraper.paused():
            victim = self._kill_a_worker()
            wait_for(
                self.server.workers,
                lambda workers: victim not in workers,
                30,
                what=f"the end of worker {victim}",
            )
        self.killed += 1
        # Its replacement, so that the next round does not kill again for one restart.
        self.server.wait_for_workers(2, other_than={victim})

    def _kill_a_worker(self) -> int:
        """SIGKILL a live worker, and return it.

        A worker listed may end on its own before the signal: a scrape
        answered as the scraper paused was the last of its requests. That
        one was recycled, not killed: its replacement is awaited, and
        another worker is killed.
        """
        while True:
            victim = min(self.server.workers())
            try:
                self.server.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                self.server.wait_for_workers(2, other_than={victim})
                continue
            return victim

    def _count_new_workers(self) -> None:
        workers = self.server.workers()
        self.restarts += len(workers - self.seen)
        self.seen |= workers

    def files_of_the_dead(self) -> tuple[list[str], int]:
        """The names and bytes of the metrics files of no live worker.

        Polled: a worker that has just ended has files until the master
        reaps it, within its main loop's second.
        """

        def of_the_dead() -> tuple[list[str], int]:
            live = {str(pid) for pid in self.server.workers()}
            dead = [p for p in self.metrics_dir.glob("*.db") if p.stem.split("_")[-1] not in live]
            return sorted(p.name for p in dead), sum(p.stat().st_size for p in dead)

        return wait_for(
            of_the_dead,
            lambda found: all(name.endswith("_archive.db") for name in found[0]),
            30,
            what="every dead worker's files folded into the archive",
        )
