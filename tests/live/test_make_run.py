"""`make run` as a new user meets it: it serves, and Ctrl-C stops it cleanly.

The README promises that `make run` needs no server, prints a token that
works, and that Ctrl-C stops gunicorn, the worker and beat once each, in a
few seconds. A shell recipe that re-signals its own process group turned
one Ctrl-C into thousands of "Warm shutdown" lines and a crash, and a
worker still booting ignored Ctrl-C and kept `make` waiting forever; this
test drives the real recipe, on the embedded default, as a terminal does.
"""

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

import pytest
import requests

from tests.support import servers
from tests.support.http import ORDER
from tests.support.live import BIN, ROOT, LiveService, base_env, free_port, wait_until_healthy
from tests.support.waits import wait_for

MAKE = shutil.which("make") or "make"
PS = shutil.which("ps") or "ps"
ENV = shutil.which("env") or "env"
STARTED_WITHIN_S = 120
STOPPED_WITHIN_S = 10
# The deliveries worker's metrics port, as the Makefile sets it (the tests'
# environment turns the payments worker's off: base_env).
DELIVERIES_METRICS_PORT = 9541


def _processes_with(marker: str) -> list[int]:
    """Pids of the processes whose environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if marker.encode() in environ.split(b"\0"):
                found.append(int(entry.name))
    return found


def _listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses on which some process listens on ``port`` (/proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def make_run(port: int, var_dir: Path) -> list[str]:
    """``make run`` on ``port`` and ``var_dir``, in the venv this suite runs in.

    `make test` made it: -o keeps make from checking or rebuilding it.
    """
    return [
        MAKE,
        "-o",
        "install",
        "run",
        f"PORT={port}",
        f"VAR_DIR={var_dir}",
        f"VENV={BIN.parent}",
        f"PYTHON={sys.executable}",
    ]


def start_make_run(
    name: str, port: int, var_dir: Path, log: Path, *, before: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """``make run`` started in its own process group, as a terminal's foreground job.

    ``before``: the command make is started through (``env …``).
    """
    return servers.start(
        name,
        [*before, *make_run(port, var_dir)],
        log=log,
        cwd=ROOT,
        env=base_env(),
        start_new_session=True,
    )


def demo_token(log: Path) -> str:
    """The demo client's token, as ``make run`` printed it to ``log``."""
    printed = re.search(r"Demo API token[^:]*: (\S+)", log.read_text())
    assert printed is not None, log.read_text()
    return printed.group(1)


@pytest.fixture
def var_dir(tmp_path: Path) -> Iterator[Path]:
    var_dir = tmp_path / "var"
    yield var_dir
    # Whatever the test's outcome, nothing it started outlives it.
    for pid in _processes_with(f"VAR_DIR={var_dir}"):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("stop", "stopped_by"),
    [
        # Ctrl-C: SIGINT to the terminal's whole foreground group.
        (lambda make: os.killpg(make.pid, signal.SIGINT), signal.SIGINT),
        # A supervisor's SIGTERM to make alone, which passes it on.
        (lambda make: make.terminate(), signal.SIGTERM),
    ],
    ids=["ctrl-c", "sigterm-to-make"],
)
def test_make_run_serves_and_stops_everything_once(
    stop: Callable[[subprocess.Popen[bytes]], None],
    stopped_by: signal.Signals,
    var_dir: Path,
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / "make-run.log"
    make = start_make_run(
        "make run",
        port,
        var_dir,
        log,
        # A terminal's shell starts a job with SIGINT and SIGQUIT at their
        # defaults, whatever it inherited. So does the test: a suite
        # started in the background, where both are ignored and stay
        # ignored across exec, would hand make a Ctrl-C it cannot hear.
        before=(ENV, "--default-signal=INT,QUIT"),
    )
    try:
        service = LiveService(base_url=f"http://127.0.0.1:{port}")
        # Migrations, the demo data and static files come first.
        wait_until_healthy(service, [make], within_s=STARTED_WITHIN_S)
        headers = {"Authorization": f"Bearer {demo_token(log)}"}

        created = requests.post(
            service.url("/v1/orders"),
            json=ORDER,
            headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
            timeout=10,
        )
        assert created.status_code == 201, created.text
        paid = requests.post(
            service.url("/v1/payments"),
            json={
                "orderId": created.json()["orderId"],
                "amount": 3980,
                "currency": "RUB",
                "paymentMethod": "pm_card_ok",
            },
            headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
            timeout=10,
        )
        assert paid.status_code == 202, paid.text
        # The worker that make run started charges it.
        operation = service.url(paid.headers["Location"])
        wait_for(
            lambda: requests.get(operation, headers=headers, timeout=5).json()["status"],
            lambda status: status == "succeeded",
            30,
            interval=0.1,
            what=f"the payment's operation {operation} succeeding",
        )
        # The feed on the embedded database: an event per effect, in order,
        # each after the one before (SQLite numbers the transactions itself).
        feed = requests.get(service.url("/v1/events"), headers=headers, timeout=5).json()
        assert [e["type"] for e in feed["results"]] == ["order.created", "payment.succeeded"]
        after = requests.get(
            service.url(f"/v1/events?after={feed['results'][0]['id']}"), headers=headers, timeout=5
        ).json()
        assert after["results"] == feed["results"][1:]

        # Both workers up before the signal: one still booting has not
        # installed its handler yet and ends by SIGTERM's default, quietly,
        # where this test counts a warm shutdown from each.
        wait_for(
            lambda: len(re.findall(r"@\S+ ready\.", log.read_text())),
            lambda ready: ready == 2,
            STARTED_WITHIN_S,
            interval=0.1,
            what="both workers of make run ready",
        )
        # A worker's metrics are for this machine only: on all interfaces,
        # anyone on the network could read them.
        assert _listening_addresses(DELIVERIES_METRICS_PORT) == {"127.0.0.1"}

        started = time.monotonic()
        stop(make)
        try:
            make.wait(timeout=STOPPED_WITHIN_S * 3)
        except subprocess.TimeoutExpired:
            # Which process of the session did not stop, and where it waits.
            processes = subprocess.run(
                [PS, "-s", str(make.pid), "-o", "pid,ppid,pgid,stat,wchan:24,args"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            raise AssertionError(f"{processes}\n{servers.evidence()}") from None
        stopped_after = time.monotonic() - started
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
    output_text = log.read_text()

    # make ends by the signal it was sent, as a shell expects of it.
    assert make.returncode == -stopped_by, output_text[-3000:]
    assert stopped_after < STOPPED_WITHIN_S, output_text[-3000:]
    assert "Traceback" not in output_text
    # The payments worker has the two slots docs/DEPLOYING.md asks of it
    # (Workers), in processes as deployed: with one, a slow charge held
    # every payment behind it.
    assert "concurrency: 2 (prefork)" in output_text, output_text[:6000]
    # Each of the two workers (payments with beat, deliveries) once.
    assert output_text.count("Warm shutdown") == 2, output_text[-3000:]
    assert output_text.count("beat: Shutting down") == 1, output_text[-3000:]
    assert output_text.count("Shutting down: Master") == 1, output_text[-3000:]
    assert "cold shutdown" not in output_text.lower()
    assert "SIGKILL" not in output_text
    # Nothing from the recipe's shell itself (job notices, wait's complaints).
    assert "bash:" not in output_text
    assert "Done" not in output_text
    assert _processes_with(f"VAR_DIR={var_dir}") == []


def test_make_run_on_a_taken_port_stops_at_once_and_revokes_no_token(var_dir: Path) -> None:
    # It used to migrate, revoke the last token and print a new one, and
    # fail only when gunicorn gave up on the port, 19 s later.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            make_run(port, var_dir),
            cwd=ROOT,
            env=base_env(),
            capture_output=True,
            text=True,
            timeout=STARTED_WITHIN_S,
        )
        took = time.monotonic() - started
    output = result.stdout + result.stderr

    assert result.returncode != 0, output
    assert took < STOPPED_WITHIN_S, output
    assert f"port {port}" in result.stderr
    # A second run beside the first needs a var/ of its own as well.
    assert f"PORT={port + 1} VAR_DIR={var_dir}-2" in result.stderr
    assert "Demo API token" not in output
    assert "osk_" not in output
    # Not even a database: nothing was migrated, nothing issued or revoked.
    assert not var_dir.exists()


def test_a_second_make_run_on_the_same_var_dir_stops_at_once_and_the_first_serves_on(
    var_dir: Path, tmp_path: Path
) -> None:
    # On another port it used to start: it revoked the first run's token,
    # and two sets of workers shared one queue and one SQLite database.
    port = free_port()
    log = tmp_path / "make-run.log"
    first = start_make_run("make run", port, var_dir, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        service = LiveService(base_url=f"http://127.0.0.1:{port}")
        wait_until_healthy(service, [first], within_s=STARTED_WITHIN_S)
        headers = {"Authorization": f"Bearer {demo_token(log)}"}

        other_port = free_port()
        second_log = tmp_path / "second-make-run.log"
        second = start_make_run("second make run", other_port, var_dir, second_log)
        try:
            second.wait(timeout=STOPPED_WITHIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"a second make run on {var_dir} went on:\n{second_log.read_text()[-3000:]}"
            ) from None
        listed = requests.get(service.url("/v1/orders"), headers=headers, timeout=10)

        output = second_log.read_text()
        assert second.returncode != 0, output
        # Which run holds var/, and both ways out: stop it, or a var/ of one's own.
        assert f"another make run (port {port}) is serving from {var_dir}/" in output
        assert f"PORT={other_port} VAR_DIR={var_dir}-2" in output
        assert "Demo API token" not in output
        assert "osk_" not in output
        # The first run's token still works: the second revoked nothing.
        assert listed.status_code == 200, listed.text
    finally:
        # As a crash ends it: every process of the runs at once, none cleaning up.
        for make in (first, second):
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                if make is not None:
                    # make and its recipe's shell; the servers have groups of their own.
                    os.killpg(make.pid, signal.SIGKILL)
        for pid in _processes_with(f"VAR_DIR={var_dir}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        first.wait()
        if second is not None:
            second.wait()

    # The kernel lets the lock go with the last process that held it: the
    # next run on this var/ is not refused by a lock nobody holds.
    with (var_dir / "run.lock").open("a") as lock:
        wait_for(
            lambda: _locked(lock),
            bool,
            STOPPED_WITHIN_S,
            interval=0.05,
            what=f"{var_dir}/run.lock released once the run's processes are gone",
        )


def _locked(file: IO[str]) -> bool:
    """Whether this process took ``file``'s lock, as make run takes it, without waiting."""
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
