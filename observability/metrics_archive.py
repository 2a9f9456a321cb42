"""Dead workers' metrics, folded into one archive per type, so that they cost nothing.

prometheus_client's multiprocess mode gives each worker process files of
its own in ``PROMETHEUS_MULTIPROC_DIR`` (``counter_<pid>.db``,
``histogram_<pid>.db``: 64 KiB each at least) and keeps them after the
process ends, so that its counts survive it; each scrape reads every file
there. With gunicorn recycling and replacing workers, the files pile up
with uptime and the scrape slows with them (docs/SCALING.md, "Worker
restarts and /metrics"). Here the master, in gunicorn's ``child_exit`` hook (which it calls
for each worker it reaps, whatever ended it: recycled, killed, timed out),
adds a dead worker's samples into ``counter_archive.db`` (and the like) and
deletes its files: the directory holds the live workers' files and one
archive per type, whatever the uptime.

The protocol, between the master (``fold_dead_worker``) and each scrape
(``ConsistentCollector``), both through a lock file in the directory:

1. A scrape takes the lock shared, reads every ``*.db`` file and releases it.
   Scrapes do not wait for each other.
2. The fold takes it exclusive, so no scrape reads while the archive has
   the dead worker's samples and its files are still there (counted twice),
   or the files are gone and the archive does not have them yet (not
   counted): either would move a counter backwards, which Prometheus reads
   as a reset.
3. Under it, the fold writes the new archive beside the old one, renames
   it over the old one, and deletes the dead worker's files.

The archive is in the very format prometheus_client writes (its own
``MmapedDict``), and named so that its ``MultiProcessCollector`` takes it
for one more process: a scrape adds it up with the live workers as usual.

This module is loaded into gunicorn's master, which must stay free of the
application: it imports prometheus_client and the standard library only.
"""

import contextlib
import fcntl
import glob
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict

logger = logging.getLogger(__name__)

# Not ``*.db``: MultiProcessCollector reads only those.
LOCK_FILE = "archive.lock"
# Where the pid stands in a file's name: ``counter_archive.db``. The
# collector reads a gauge's pid from the name, and drops it from the labels
# in every mode but ``all``, which is not archived.
ARCHIVE = "archive"
# How long the master waits for the scrapes in progress to end. A scrape
# holds the lock while it reads the files, tens of milliseconds; one that
# holds it for seconds is stuck (a worker stopped mid-scrape), and the
# master, which watches every worker, must not wait on it. Past this the
# fold is put off until the next worker exits: the dead worker's files stay
# and are counted as they are, correctly, one fold late.
LOCK_WAIT_S = 2.0
_LOCK_POLL_S = 0.005

Sample = tuple[float, float]  # (value, timestamp), as MmapedDict stores them


def _total(old: Sample, new: Sample) -> Sample:
    return old[0] + new[0], 0.0


def _least(old: Sample, new: Sample) -> Sample:
    return min(old, new, key=lambda s: s[0])


def _greatest(old: Sample, new: Sample) -> Sample:
    return max(old, new, key=lambda s: s[0])


def _newest(old: Sample, new: Sample) -> Sample:
    return max(old, new, key=lambda s: s[1])


# How a dead process's samples join the archive, by the first part of its
# file names (the type, and a gauge's multiprocess_mode): the way the
# collector combines processes, so that a scrape reads the same numbers
# before and after the fold. The kinds missing here are dropped with the
# process: the ``live*`` gauges (mark_process_dead removes them) and
# ``gauge_all``, one sample per process labelled with its pid, which kept
# for every process that ever ran is the very growth this module ends.
# The service has no gauge of its own (its only ones are read from the
# database at scrape time, operations/metrics.py); the modes are here so
# that adding one does not silently grow the directory again.
COMBINE: dict[str, Callable[[Sample, Sample], Sample]] = {
    "counter": _total,
    "histogram": _total,  # per-bucket counts: the collector makes them cumulative
    "summary": _total,
    "gauge_sum": _total,
    "gauge_min": _least,
    "gauge_max": _greatest,
    "gauge_mostrecent": _newest,
}

# The pids whose fold was put off (LOCK_WAIT_S), tried again at the next
# exit. Only the master folds, one worker at a time (gunicorn 23+ handles
# SIGCHLD in its main loop, not in the signal handler).
_deferred: set[int] = set()


class ConsistentCollector(multiprocess.MultiProcessCollector):
    """MultiProcessCollector that reads the files under the lock shared: never during a fold.

    It also passes over empty files. A process makes its file empty, then
    gives it its size (MmapedDict), with no lock that a scrape could take:
    a scrape in between failed (struct.error, a 500), which a new worker
    every few seconds made frequent. An empty file holds no sample yet.
    """

    def collect(self) -> list[Metric]:
        with _locked(self._path, fcntl.LOCK_SH):
            return list(self.merge(readable_files(self._path), accumulate=True))


def readable_files(directory: str) -> list[str]:
    """The directory's sample files that hold samples: every ``*.db`` but the empty ones."""
    files = glob.glob(os.path.join(glob.escape(directory), "*.db"))
    return [f for f in files if os.path.getsize(f)]


def fold_dead_worker(pid: int, directory: str | None = None) -> bool:
    """Add the samples of the dead process ``pid`` to the archive and delete its files.

    ``directory`` is ``PROMETHEUS_MULTIPROC_DIR`` unless given. The process
    must have ended, and no other may take its pid before this returns
    (gunicorn's master calls it before it forks a replacement). Folds too
    the processes whose fold was put off. Returns False when this one is
    put off in turn, since scrapes held the lock for ``LOCK_WAIT_S``.
    """
    directory = directory or os.environ["PROMETHEUS_MULTIPROC_DIR"]
    _deferred.add(pid)
    try:
        with _locked(directory, fcntl.LOCK_EX, within_s=LOCK_WAIT_S):
            for dead in sorted(_deferred):
                # A pid put off may have been given to a new worker since;
                # that worker carries on the files' counts (prometheus_client
                # opens them as they are) and they are folded when it ends.
                if dead == pid or not process_alive(dead):
                    fold_files(dead, directory)
                    _deferred.discard(dead)
    except TimeoutError:
        logger.warning(
            "metrics of worker %s not archived: a scrape held %s for %.0f s",
            pid,
            LOCK_FILE,
            LOCK_WAIT_S,
        )
        return False
    return True


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process has the pid now
    return True


def fold_files(pid: int, directory: str) -> None:
    """Move the dead process ``pid``'s samples into the archive, with no lock.

    For a caller that keeps every reader of the directory out meanwhile
    (:func:`fold_dead_worker` with the lock file).
    """
    multiprocess.mark_process_dead(pid, directory)
    suffix = f"_{pid}.db"
    for dead in glob.glob(os.path.join(glob.escape(directory), f"*{suffix}")):
        kind = os.path.basename(dead).removesuffix(suffix)
        combine = COMBINE.get(kind)
        if combine is not None:
            archive = os.path.join(directory, f"{kind}_{ARCHIVE}.db")
            _write(archive, _combined(_read(archive), _read(dead), combine))
        os.remove(dead)


def _read(path: str) -> dict[str, Sample]:
    try:
        return {
            key: (value, timestamp)
            for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(path)
        }
    except FileNotFoundError:
        return {}


def _combined(
    archived: dict[str, Sample],
    dead: dict[str, Sample],
    combine: Callable[[Sample, Sample], Sample],
) -> dict[str, Sample]:
    merged = dict(archived)
    for key, sample in dead.items():
        merged[key] = combine(merged[key], sample) if key in merged else sample
    return merged


def _write(archive: str, samples: dict[str, Sample]) -> None:
    # Renamed over the old archive only once whole: a master that dies here
    # leaves the old archive and the dead files, both still right. (One that
    # dies between the rename and the removal of the dead files counts that
    # worker twice; but a master's death ends the server and its directory,
    # config/gunicorn.py.) No fsync: the directory does not outlive the
    # machine's uptime, nor should it.
    fresh = f"{archive}.tmp"
    # MmapedDict keeps what a file holds: one left by a master that died
    # mid-write must not be added in.
    with contextlib.suppress(FileNotFoundError):
        os.remove(fresh)
    with _closing(MmapedDict(fresh)) as mapped:
        for key, (value, timestamp) in sorted(samples.items()):
            mapped.write_value(key, value, timestamp)
    os.replace(fresh, archive)


@contextmanager
def _closing(mapped: MmapedDict) -> Iterator[MmapedDict]:
    try:
        yield mapped
    finally:
        mapped.close()


@contextmanager
def _locked(directory: str, operation: int, *, within_s: float | None = None) -> Iterator[None]:
    """The directory's lock file, flock'ed with ``operation``; released on exit.

    Waits for it for ``within_s`` at most when given (TimeoutError past it).
    The lock goes with the descriptor, so a process killed while holding it
    holds it no more.
    """
    fd = os.open(Path(directory) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _acquire(fd, operation, within_s)
        yield
    finally:
        os.close(fd)


def _acquire(fd: int, operation: int, within_s: float | None) -> None:
    if within_s is None:
        fcntl.flock(fd, operation)
        return
    # flock has no timeout of its own; polled, it costs the master a few
    # wake-ups when a scrape is in progress, none otherwise.
    deadline = time.monotonic() + within_s
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(LOCK_FILE) from None
            time.sleep(_LOCK_POLL_S)
