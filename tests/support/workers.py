"""A running gunicorn seen from outside: its workers, their memory and CPU, its metrics directory.

Read from /proc (Linux), so that the test and the bench measure the server
as deployed, not a process that knows it is watched. gunicorn names its
master in the pid file given with ``--pid`` (``pid_file_args``).
"""

import os
import signal
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from tests.support.waits import wait_for

# /proc/<pid>/stat counts CPU time in clock ticks.
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def pid_file_args(pid_file: Path) -> list[str]:
    """gunicorn's options that make it write its master's pid to ``pid_file``."""
    return ["--pid", str(pid_file)]


@dataclass(frozen=True)
class Gunicorn:
    master: int

    @classmethod
    def from_pid_file(cls, pid_file: Path) -> "Gunicorn":
        # gunicorn writes it before it listens; a healthy server has it.
        return cls(master=int(pid_file.read_text().strip()))

    def workers(self) -> set[int]:
        """The master's live children (its workers), from the parent pid of every process."""
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = _fields(stat.read_text())
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended while we looked
            # A worker reaped by now, or not yet, shows as a zombie: not live.
            if int(fields[1]) == self.master and fields[0] != "Z":
                found.add(int(stat.parent.name))
        return found

    def wait_for_workers(
        self, count: int, *, other_than: AbstractSet[int] = frozenset(), within_s: float = 60
    ) -> set[int]:
        """Until ``count`` workers run, none of them in ``other_than``; returns their pids."""

        # A process's start or end sends no event this side can wait on.
        return wait_for(
            self.workers,
            lambda workers: len(workers) == count and not workers & other_than,
            within_s,
            what=f"{count} workers of gunicorn {self.master}, none of {sorted(other_than)}",
        )

    def cpu_s(self) -> float:
        """The master's own CPU time, user and system."""
        return process_cpu_s(self.master)

    def reaped_cpu_s(self) -> float:
        """The CPU time of the master's children that ended and were reaped."""
        fields = _fields(Path(f"/proc/{self.master}/stat").read_text())
        return (int(fields[13]) + int(fields[14])) * _TICK_S

    def kill(self, worker: int, sig: signal.Signals = signal.SIGKILL) -> None:
        os.kill(worker, sig)


def process_cpu_s(pid: int) -> float:
    """CPU time of ``pid``, user and system."""
    fields = _fields(Path(f"/proc/{pid}/stat").read_text())
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ProcessLookupError(pid)


def metrics_files(directory: Path) -> tuple[int, int]:
    """(files, bytes) of what a scrape reads in the metrics directory: its ``*.db`` files."""
    sizes = [path.stat().st_size for path in directory.glob("*.db")]
    return len(sizes), sum(sizes)


def _fields(stat: str) -> list[str]:
    """/proc/<pid>/stat from its third field (state) on; the name in parentheses may hold spaces."""
    return stat[stat.rindex(")") + 2 :].split()
