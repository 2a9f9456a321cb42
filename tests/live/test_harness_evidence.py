"""A failure of a test that starts servers tells why, from the CI log alone.

The harness (tests/support/servers.py and waits.py) puts in a failure what
its servers say, how each is or ended and its log's last lines, names the
directories it keeps instead of removing them, and has every wait say what
it waited on and the last answer it got. Each is shown here on a failure
made on purpose, with real processes.
"""

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import servers
from tests.support.live import ROOT, free_port, wait_until_answering
from tests.support.waits import http_answer, wait_for, wait_until


def test_a_server_that_exits_at_its_start_is_told_with_its_status_and_log(tmp_path: Path) -> None:
    process = servers.start(
        "a server that cannot listen",
        ["/bin/sh", "-c", "echo 'bind: address already in use' >&2; exit 3"],
        log=tmp_path / "server.log",
    )

    with pytest.raises(AssertionError) as failed:
        wait_until_answering(f"http://127.0.0.1:{free_port()}/healthz", [process], within_s=10)

    message = str(failed.value)
    assert "a server that cannot listen: exited with status 3" in message
    assert f"last lines of {tmp_path / 'server.log'}" in message
    assert "| bind: address already in use" in message


def test_a_server_ended_by_a_signal_is_told_so(tmp_path: Path) -> None:
    process = servers.start("a sleeper", ["/bin/sleep", "60"], log=tmp_path / "sleeper.log")
    servers.kill(process)

    with pytest.raises(AssertionError) as failed:
        wait_until_answering(f"http://127.0.0.1:{free_port()}/", [process], within_s=10)

    assert "a sleeper: killed by SIGKILL" in str(failed.value)
    assert "the harness had sent it SIGKILL" in str(failed.value)
    assert f"last lines of {tmp_path / 'sleeper.log'}:\n  | (empty)" in str(failed.value)


@pytest.fixture
def starting_node() -> Iterator[str]:
    """An HTTP server that answers 503 with a body, as a Patroni node that does not lead yet."""

    class Starting(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"state": "starting", "role": "replica"}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Starting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/primary"
    finally:
        server.shutdown()
        server.server_close()


def test_a_wait_that_runs_out_says_what_it_waited_on_and_the_last_answer(
    starting_node: str,
) -> None:
    with pytest.raises(AssertionError) as failed:
        wait_until(lambda: http_answer(starting_node), 0.3, what="the first leader")

    assert str(failed.value).startswith(
        f"the first leader: not reached within 0.3 s; the last answer: GET {starting_node}:"
        ' 503 Service Unavailable: {"state": "starting", "role": "replica"}'
    )


def test_a_wait_tells_the_last_value_and_the_last_exception() -> None:
    reads = iter(range(1000))

    def read() -> int:
        # Three values, then a server that refuses every connection.
        if (n := next(reads)) < 3:
            return n
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(AssertionError) as value:
        wait_for(lambda: 41, lambda n: n == 42, 0.05, what="the answer")
    with pytest.raises(AssertionError) as exception:
        wait_for(read, lambda n: n == 3, 0.3, what="three", ignoring=(OSError,))

    assert "the answer: not reached within 0.05 s; the last answer: 41" in str(value.value)
    assert "the last answer: ConnectionRefusedError: [Errno 111] Connection refused" in str(
        exception.value
    )


@pytest.fixture(scope="module")
def probe_report() -> Iterator[str]:
    """tests/live/evidence_probe.py in a pytest of its own: its report, as CI prints it.

    The directories its failures keep are removed afterwards.
    """
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/live/evidence_probe.py"],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        yield run.stdout + run.stderr
    finally:
        for path in re.findall(r"kept for this failure: (\S+)", run.stdout):
            shutil.rmtree(path, ignore_errors=True)


def failure(report: str, test: str) -> str:
    """The part of ``report`` about the failure of ``test``."""
    found = re.search(rf"_+ {test} _+\n(.*?)(?=\n_{{3,}} \w|\n=+ short test summary)", report, re.S)
    assert found is not None, report
    return found.group(1)


def test_a_failed_tests_report_shows_its_servers_and_keeps_their_directories(
    probe_report: str,
) -> None:
    fixtures = failure(probe_report, "test_fails_while_a_fixtures_server_runs")
    blocks = failure(probe_report, "test_fails_inside_a_servers_block")
    kept = [Path(p) for p in re.findall(r"kept for this failure: (\S+)", probe_report)]

    assert "3 failed" in probe_report
    # The fixture's server, still running; the block's own, stopped by the
    # harness as the failure left the block. Each one's directory, kept.
    assert re.search(r"- servers -+\nredis-server: running \(pid \d+\)", fixtures), fixtures
    assert "Ready to accept connections" in fixtures, fixtures
    assert re.search(
        r"redis-server: exited with status 0 .*; the harness had sent it SIGTERM", blocks
    ), blocks
    assert len(kept) == 2, probe_report
    assert all(path.is_dir() and path.name.startswith("faults-redis-") for path in kept), kept


def test_a_failed_commands_output_is_in_the_report(probe_report: str) -> None:
    command = failure(probe_report, "test_fails_as_a_command_it_ran_failed")

    assert re.search(r"- the command's output -+\nwhat the command said", command), command
