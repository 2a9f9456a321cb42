"""Tests that fail on purpose while their servers run, for tests/live/test_harness_evidence.py.

Not collected by the suite (its name is not ``test_*``): that module runs it
in a pytest of its own and reads the report, as a CI log would show it.
"""

import subprocess
from collections.abc import Iterator

import pytest

from tests.support.faults import RedisServer


@pytest.fixture(scope="module")
def running() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def test_fails_while_a_fixtures_server_runs(running: RedisServer) -> None:
    raise AssertionError("the probe's own failure, its server still running")


def test_fails_inside_a_servers_block() -> None:
    with RedisServer():
        raise AssertionError("the probe's own failure, inside the server's block")


def test_fails_as_a_command_it_ran_failed() -> None:
    subprocess.run(
        ["/bin/sh", "-c", "echo 'what the command said' >&2; exit 2"],
        capture_output=True,
        check=True,
    )
