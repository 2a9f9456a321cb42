"""What the servers a test starts leave behind, so that a failure can tell why.

A harness starts each server with :func:`start`, its output in a log file
of its own, or hands one it started otherwise to :func:`watch`; the
directory a server works in comes from :func:`workdir` and goes with
:func:`discard` (or both, around a block, from :func:`workspace`). When a
test fails, :func:`evidence` says, for every server the test ran, how it
is or how it ended (running, exited with a status, killed by a signal,
stopped by the harness) and the last lines of its log, and names the
directories it keeps: a failed test's directories are kept, not removed,
so that the rest of the logs and the data can still be read.

Two places tell it: a wait that runs out of time puts it in its own message
(tests/support/waits.py), since a harness whose start failed cleans up
before the test's report is written; and the report of any other failed
test gets it as a section of its own (tests/conftest.py). A server already
told of in a failure's message is not told again in its report.

Why it matters: a server's log is usually the only place that says why it
did not come up (a port taken, a permission, a crash at start), and it
lives in a directory the harness removes once the test ends. A CI log must
be enough to tell a failure's cause.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What a server's log shows in a failure: its last lines, and no more bytes
# than this of them, so that a chatty server cannot drown the CI log.
TAIL_LINES = 40
_TAIL_BYTES = 8 * 1024
# Longer lines are cut: a log line is read for its start.
_LINE_CHARS = 400


@dataclass(eq=False)
class Server:
    """A server a test started: its process, where it logs, and what the harness did to it."""

    name: str
    # None for a server another library started (Chromium, by Playwright).
    process: "subprocess.Popen[Any] | None"
    # Where it writes: its output, and any log file of its own.
    logs: Sequence[Path] = ()
    # How a server without a process here is, in words.
    describe_state: Callable[[], str] | None = None
    # What the harness did to end it (SIGTERM, SIGKILL), with when, if it did.
    ended_by: str | None = None
    started_at: float = field(default_factory=time.monotonic)
    # Already told in a failure's message during the current test.
    told: bool = False

    def running(self) -> bool:
        return self.process is None or self.process.poll() is None

    def state(self) -> str:
        """How the server is, or how it ended."""
        if self.process is None:
            return self.describe_state() if self.describe_state else "started by another library"
        code = self.process.poll()
        if code is None:
            now = f"running (pid {self.process.pid})"
        elif code < 0:
            now = f"killed by {_signal_name(-code)} (pid {self.process.pid})"
        else:
            now = f"exited with status {code} (pid {self.process.pid})"
        if self.ended_by is not None:
            now += f"; the harness had sent it {self.ended_by}"
        return now

    def end(self, how: signal.Signals) -> None:
        """Send ``how`` to the server, and remember that the harness did."""
        if self.process is not None and self.process.poll() is None:
            seconds = time.monotonic() - self.started_at
            self.ended_by = f"{how.name} {seconds:.1f} s after its start"
            self.process.send_signal(how)

    def evidence(self) -> str:
        lines = [f"{self.name}: {self.state()}"]
        if not self.logs:
            lines.append("  (it logs nowhere the harness reads)")
        for log in self.logs:
            lines.append(f"  last lines of {log}:")
            lines.extend(f"  | {line}" for line in tail(log))
        return "\n".join(lines)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def tail(log: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``log`` (within its last 8 KiB), or why there are none."""
    try:
        with log.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - _TAIL_BYTES))
            text = file.read().decode("utf-8", "replace")
    except OSError as error:
        return [f"(unreadable: {error})"]
    if not text:
        return ["(empty)"]
    kept = text.splitlines()[-lines:]
    return [line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS] + "…" for line in kept]


@dataclass
class _Registry:
    """The servers and directories of the test under way (and of the fixtures it still uses)."""

    servers: list[Server] = field(default_factory=list)
    # Directories in use.
    directories: list[Path] = field(default_factory=list)
    # Directories a failure has named: never removed, whenever their harness ends.
    named: set[Path] = field(default_factory=set)
    # Directories discarded during the test under way but kept, to be named.
    kept: list[Path] = field(default_factory=list)
    # Set once the test under way has failed: what it leaves is kept.
    failed: bool = False


_registry = _Registry()


def begin_test() -> None:
    """Forget what earlier tests started and ended; what still runs stays watched."""
    _registry.servers = [s for s in _registry.servers if s.running()]
    for server in _registry.servers:
        server.told = False
    _registry.kept = []
    _registry.failed = False


def start(
    name: str, argv: Sequence[str], *, log: Path, other_logs: Sequence[Path] = (), **popen: Any
) -> "subprocess.Popen[bytes]":
    """Start ``argv`` with its output (stdout and stderr) appended to ``log``, and watch it.

    ``other_logs`` are the files it writes its own log to, if any.
    ``popen`` is passed on to ``subprocess.Popen`` (``cwd``, ``env``,
    ``user``…); stdin is closed unless it says otherwise.
    """
    popen.setdefault("stdin", subprocess.DEVNULL)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as output:
        process = subprocess.Popen(list(argv), stdout=output, stderr=subprocess.STDOUT, **popen)
    watch(name, process, [log, *other_logs])
    return process


def as_user(user: str) -> dict[str, Any]:
    """:func:`start`'s (and ``subprocess.Popen``'s) arguments that run a server as ``user``.

    Only when the tests run as root: PostgreSQL, PgBouncer and Patroni refuse
    root, and another user cannot switch users.
    """
    return {"user": user, "group": user, "extra_groups": []} if os.geteuid() == 0 else {}


def watch(
    name: str,
    process: "subprocess.Popen[Any] | None",
    logs: Sequence[Path] = (),
    *,
    state: Callable[[], str] | None = None,
) -> Server:
    """Watch a server started otherwise: its state and logs go into a failure's evidence.

    A server another library started (``process`` None) says how it is
    through ``state``, and is watched until :func:`forget`.
    """
    server = Server(name, process, list(logs), state)
    _registry.servers.append(server)
    return server


def forget(server: Server) -> None:
    """Stop watching ``server``: it has ended, and no failure of a later test is about it."""
    if server in _registry.servers:
        _registry.servers.remove(server)


def _watched(process: "subprocess.Popen[Any]") -> Server | None:
    """The watched server of ``process``, if it is one."""
    return next((s for s in _registry.servers if s.process is process), None)


def stop(
    processes: Iterable["subprocess.Popen[Any]"],
    *,
    how: signal.Signals = signal.SIGTERM,
    within_s: float = 20,
) -> None:
    """``how`` to each, then each waited for; one still running after ``within_s`` is killed."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        _end(process, how)
    for process in running:
        try:
            process.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            _end(process, signal.SIGKILL)
            process.wait()


def kill(process: "subprocess.Popen[Any]", *, wait: bool = True) -> None:
    """SIGKILL, as a crash or the OOM killer would; returns once it has ended, if ``wait``."""
    _end(process, signal.SIGKILL)
    if wait:
        process.wait()


def _end(process: "subprocess.Popen[Any]", how: signal.Signals) -> None:
    server = _watched(process)
    if server is not None:
        server.end(how)
    elif process.poll() is None:
        process.send_signal(how)


def workdir(prefix: str) -> Path:
    """A new temporary directory for a server's files: removed by :func:`discard`, unless kept."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    _registry.directories.append(directory)
    return directory


@contextmanager
def workspace(prefix: str) -> Iterator[Path]:
    """A :func:`workdir` for the block's servers: discarded as it ends, kept if it ends failing."""
    directory = workdir(prefix)
    try:
        yield directory
    except BaseException:
        discard(directory, keep=True)
        raise
    discard(directory)


def discard(directory: Path, *, keep: bool = False) -> None:
    """Remove ``directory``, unless ``keep`` (a failure under way) or a failure needs it."""
    if directory in _registry.directories:
        _registry.directories.remove(directory)
    if keep or _registry.failed or directory in _registry.named:
        if directory not in _registry.kept:
            _registry.kept.append(directory)
        return
    shutil.rmtree(directory, ignore_errors=True)


def evidence(*, only_untold: bool = False) -> str:
    """What the servers of the test under way say, and the directories kept: for a failure.

    Calling it marks the test failed: the directories its servers use are
    kept from then on, and named here. ``only_untold`` leaves out the
    servers a failure's message has told of already.
    """
    _registry.failed = True
    parts = []
    for server in _registry.servers:
        if not (only_untold and server.told):
            parts.append(server.evidence())
            server.told = True
    directories = [*_registry.directories, *_registry.kept]
    if only_untold:
        directories = [d for d in directories if d not in _registry.named]
    _registry.named.update(directories)
    if directories:
        parts.append("kept for this failure: " + ", ".join(map(str, directories)))
    return "\n".join(parts)
