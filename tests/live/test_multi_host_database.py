"""A multi-host ``DATABASE_URL``: every process works against whichever host is the primary.

``DATABASE_URL`` names both nodes of a Patroni cluster, the standby first,
with ``target_session_attrs=read-write`` (contract §1): libpq tries the
standby, finds it read-only, and goes on to the primary. The administration
commands, gunicorn, the Celery worker and beat all run on that URL and
nothing else. Then the cluster switches over, and the same processes,
never restarted, carry on against the new primary: each new connection
goes through the list again. (tests/faults/test_failover.py does the same
under load, with the primary killed.)
"""

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.test_alert_rules import patroni_metric_names_in_rules
from tests.support import servers
from tests.support.faults import RedisServer
from tests.support.live import (
    BIN,
    ROOT,
    base_env,
    manage,
    paid_order,
    post_command,
    serve,
)
from tests.support.patroni import CONFIG, PatroniCluster, primary_proxy
from tests.support.waits import describe, wait_for

# Keys expire after a second and beat sends the purge every second, so that
# the purge is seen to run through beat and the worker within the test.
FAST_PURGE = {"IDEMPOTENCY_KEY_TTL": "1", "IDEMPOTENCY_PURGE_INTERVAL": "1"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[PatroniCluster]:
    """One cluster for the module: each test starts from whichever node leads."""
    with PatroniCluster() as cluster:
        cluster.create_database("orders")
        yield cluster


def test_every_process_works_on_the_primary_and_follows_a_switchover(
    cluster: PatroniCluster, tmp_path: Path
) -> None:
    primary, standby = cluster.leader(), cluster.standby()
    url = cluster.url("orders", first=standby)
    with RedisServer() as broker:
        env = base_env(
            DATABASE_URL=url, CELERY_BROKER_URL=broker.url(), VAR_DIR=str(tmp_path), **FAST_PURGE
        )
        manage("migrate", "--verbosity=0", env=env)
        manage("seed_demo", env=env)
        token = manage("create_api_client", "multi", "host", env=env).splitlines()[-1]
        with serve(env, celery=True) as service, beat(env, tmp_path) as scheduler:
            first = paid_order(service, token, key="before", send=post_with_retries)
            wait_until_purged(url, what="the purge through beat")

            cluster.switchover(to=standby)
            second = paid_order(service, token, key="after", send=post_with_retries)
            wait_until_purged(url, what="the purge after the switchover")
            assert scheduler.poll() is None

        ledger = [json.loads(line) for line in manage("provider_ledger", env=env).splitlines()]
        purged = manage("purge_idempotency_keys", env=env)
        operations = manage("operations", env=env)

    assert cluster.leader() is standby
    assert served_by(url) == standby.port != primary.port
    assert {first, second} == {entry["paymentId"] for entry in ledger}
    assert "0" in purged
    assert "payment.charge" in operations


def post_with_retries(url: str, body: Any, *, token: str, key: str) -> requests.Response:
    """A command under one key, retried while the service answers 503 (a switchover)."""
    deadline = time.monotonic() + 30
    while (answer := post_command(url, body, token=token, key=key)).status_code == 503:
        assert time.monotonic() < deadline, f"still 503 after 30 s: {describe(answer)}"
        time.sleep(float(answer.headers["Retry-After"]) / 4)  # a client's pause
    assert answer.status_code in (201, 202), describe(answer)
    return answer


class beat:  # noqa: N801 (a context manager read as a function)
    """``celery -A config beat`` with ``env``, until the block ends."""

    def __init__(self, env: dict[str, str], directory: Path) -> None:
        self.command = [
            str(BIN / "celery"),
            "-A",
            "config",
            "beat",
            "--loglevel=INFO",
            f"--schedule={directory / 'beat-schedule'}",
        ]
        self.env = env
        self.log = directory / "beat.log"

    def __enter__(self) -> "subprocess.Popen[bytes]":
        self.process = servers.start(
            "celery beat", self.command, log=self.log, cwd=ROOT, env=self.env
        )
        return self.process

    def __exit__(self, *exc_info: object) -> None:
        servers.stop([self.process])


def keys(url: str) -> int:
    """How many idempotency keys the primary holds."""
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT count(*) FROM idempotency_idempotencykey").fetchone()
    return 0 if row is None else int(row[0])


def wait_until_purged(url: str, *, what: str) -> None:
    """Until beat's purge has deleted every idempotency key of the database at ``url``."""
    wait_for(lambda: keys(url), lambda n: n == 0, 30, interval=0.05, what=what)


def served_by(url: str) -> int:
    """The port of the server a new connection to ``url`` reaches."""
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT inet_server_port()").fetchone()
    assert row is not None
    return int(row[0])


def wait_until_served_by(url: str, port: int, *, what: str) -> None:
    """Until a new connection to ``url`` reaches the server on ``port`` (none may answer yet)."""
    wait_for(
        lambda: served_by(url),
        lambda served: served == port,
        10,
        interval=0.05,
        what=f"{what} (port {port})",
        ignoring=(psycopg.OperationalError,),
    )


def test_haproxy_leads_to_the_primary_through_a_switchover(cluster: PatroniCluster) -> None:
    primary, standby = cluster.leader(), cluster.standby()
    with primary_proxy(cluster) as url:
        # HAProxy checks every node's GET /primary each second.
        wait_until_served_by(url, primary.port, what="HAProxy sending connections to the primary")

        asked_at = time.monotonic()
        cluster.switchover(to=standby)
        switched_at = time.monotonic()
        wait_until_served_by(
            url, standby.port, what="HAProxy sending new connections to the new primary"
        )
        rerouted_s = time.monotonic() - switched_at

    assert cluster.leader() is standby
    # Until two failed checks a second apart take the old primary out, a
    # new connection may still reach it (round robin over the servers up);
    # one good check brings the new one in.
    assert rerouted_s < 5, (switched_at - asked_at, rerouted_s)


def test_patronis_scrape_has_every_patroni_metric_the_rules_read(cluster: PatroniCluster) -> None:
    names: set[str] = set()
    for node in cluster.nodes:
        scrape = requests.get(f"{node.rest_url}/metrics", timeout=5).text
        # Parsed, not linted: promtool's lint refuses Patroni's counters
        # without "_total", which are Patroni's to name.
        names |= {family.name for family in text_string_to_metric_families(scrape)}

    assert patroni_metric_names_in_rules() - names == set()


def test_each_node_runs_the_deployed_configuration_from_a_copy_its_user_can_read(
    cluster: PatroniCluster,
) -> None:
    # Patroni runs as the postgres user, who may not reach the checkout (a
    # clone in a `mktemp -d` directory), and takes a file it cannot read for
    # none at all: it would then exit at its start (tests/support/patroni.py).
    for node in cluster.nodes:
        assert node.process is not None
        # The command line it runs: python3, patroni, the configuration.
        command = Path(f"/proc/{node.process.pid}/cmdline").read_text()
        config = Path(command.rstrip("\0").split("\0")[-1])

        assert config.parent == cluster.directory
        assert config.read_bytes() == CONFIG.read_bytes()
        assert readable_as(servers.as_user("postgres"), config)


def readable_as(user: dict[str, Any], path: Path) -> bool:
    """Whether ``path`` can be read by the process ``user`` runs as (``servers.as_user``)."""
    done = subprocess.run(["/usr/bin/test", "-r", str(path)], check=False, **user)
    return done.returncode == 0
