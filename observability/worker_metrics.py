"""A Celery worker's own metrics, served on ``WORKER_METRICS_PORT`` (default 9540; 0: none).

It binds ``WORKER_METRICS_ADDR``: all interfaces by default, for a
Prometheus on another host or container; ``make run`` binds 127.0.0.1.

Some facts happen only in workers: provider calls and their results,
operations ending, their attempts. The web nodes cannot count them, and a
worker may run on another host, so each worker serves what it counted, and
Prometheus scrapes it like any target (deploy/prometheus/prometheus.yml).

A worker's tasks run in child processes (the prefork pool), which Celery
replaces when they die or are recycled. As with gunicorn
(observability/metrics.py), each process writes its samples to files in a
directory of the worker's own, which a scrape adds up; and each scrape
first folds the files of children that have ended into the archive
(observability/metrics_archive.py), so that their counts survive them and
the directory does not grow with restarts. Here the main process serves
the scrapes, and sees its children end only by looking; a child's pid is
not reused while its parent has not reaped it, and a reused one only
carries the files' counts on (metrics_archive's fold).

Only ``celery worker`` sends the signals that start this
(config/celery.py): a worker that a test starts in its own process serves
nothing.
"""

import glob
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, multiprocess, start_http_server
from prometheus_client.metrics_core import Metric

from observability.metrics_archive import ARCHIVE, fold_files, process_alive, readable_files

logger = logging.getLogger(__name__)

_PID_IN_NAME = re.compile(r"_(\d+)\.db$")


def prepare_directory() -> str:
    """Make the worker's metrics directory, before any process counts; returns it.

    Called in the worker's main process before the pool starts, so that its
    children inherit it. prometheus_client picks its storage when it is
    imported; should it have been imported already, it is pointed at the
    files here, before any metric of a worker is written.
    """
    directory = tempfile.mkdtemp(prefix="order-service-worker-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    if "prometheus_client.values" in sys.modules:
        from prometheus_client import values

        values.ValueClass = values.MultiProcessValue()
    return directory


# Functions that give every series of a worker's metrics its 0, registered
# by the apps that own them (register_series).
_series: list[Callable[[], None]] = []


def register_series(initialise: Callable[[], None]) -> None:
    """Have ``initialise`` create its metrics' series, at 0, in each worker that serves them.

    ``increase()`` over a series that did not exist before sees no rise in
    its first sample: an alert on the first exhausted operation would miss
    it. Only in workers: the web nodes would serve zeros of what they never count.
    """
    _series.append(initialise)


def serve(address: str, port: int, directory: str) -> None:
    """Serve the worker's metrics on ``address``:``port``, in a thread of this process.

    :raises SystemExit: the port cannot be bound; the worker does not start.
    """
    for initialise in _series:
        initialise()
    registry = CollectorRegistry()
    _FoldingCollector(registry, directory)
    try:
        start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        # Most often another worker on the host has the port: a scrape of
        # it then returns that worker's counts, and this one's work would
        # go uncounted with nothing to show it. A worker nobody can see
        # does not start; its exit is seen at once.
        logger.error(
            "worker metrics cannot be served on port %d of %s (%s): give each worker on a"
            " host a WORKER_METRICS_PORT of its own (0: none)",
            port,
            address,
            exc,
        )
        raise SystemExit(f"WORKER_METRICS_PORT {port}: {exc}") from None
    logger.info("worker metrics on port %d of %s", port, address)


def remove_directory(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


class _FoldingCollector(multiprocess.MultiProcessCollector):
    """The worker's processes' samples, the ended ones folded first, one scrape at a time.

    Not metrics_archive's lock file, which gunicorn's master and its
    workers share: here the scrapes, in threads of the main process, are
    the only ones that fold or read, and the pool forks its children from
    that process while they run. A child forked while a scrape held the
    file's lock held it too (``flock`` belongs to the open file, which the
    child inherits) for as long as it lived, and every scrape after waited
    on it: a lock of the process cannot be inherited that way.
    """

    _lock = threading.Lock()

    def collect(self) -> list[Metric]:
        with self._lock:
            for pid in _dead_pids(self._path):
                fold_files(pid, self._path)
            return list(self.merge(readable_files(self._path), accumulate=True))


def _dead_pids(directory: str) -> set[int]:
    pids = set()
    for path in glob.glob(os.path.join(glob.escape(directory), "*.db")):
        match = _PID_IN_NAME.search(path)
        if match is not None and not path.endswith(f"_{ARCHIVE}.db"):
            pids.add(int(match.group(1)))
    return {pid for pid in pids if not process_alive(pid)}
