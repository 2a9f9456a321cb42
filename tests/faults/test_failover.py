"""Exactly once across a failover: the primary killed, switched over, its standby lost.

The service runs on a Patroni cluster with a synchronous standby, through
the multi-host URL (tests/faults/failover.py), with the provider's ledger
outside the cluster. Clients keep placing and paying orders while the
fault happens. Afterwards every acknowledged order and payment is still
there, nothing happened twice, the provider charged each order once, and
every operation ended. Each scenario prints its line: what was
acknowledged and lost, and how long the service took to come back.

Why it holds: every commit waits until the synchronous standby has it,
and Patroni promotes only that standby, so whatever a client was told is
on the new primary. A command in flight at the kill was told nothing
(its connection broke: ``503``), and its retry under the same key gets
either the replay, if its commit had reached the standby, or a single
execution. An operation a worker held gets its lease back and is charged
again under the same provider key, which the provider answers with the
first charge.
"""

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.faults.failover import (
    FailoverAudit,
    FailoverFigures,
    Load,
    Recovery,
    ReplicatedService,
    audit,
    replicated_service,
)
from tests.faults.harness import Figures, seconds_until_finished
from tests.support.waits import Answer, wait_until

# From the kill to the first command that succeeds and to the last
# operation's end, Patroni's detection included: its leader key lapses
# after ttl (20 s, deploy/patroni/patroni.yml), and the standby then takes
# over within one loop.
FAILOVER_GOAL_S = 30.0
# A planned switchover hands over at once, with no key to wait for.
SWITCHOVER_GOAL_S = 20.0
# The standby lost: commits wait until Patroni, at its next loop (loop_wait,
# 2 s), stops naming it synchronous; then they go on on the primary alone.
STANDBY_LOST_GOAL_S = 10.0
# Payments accepted before the fault, so that it meets work in every state.
PAYMENTS_BEFORE = 8
# Commands acknowledged after the first success, before the load stops.
COMMANDS_AFTER = 10


@contextmanager
def under_load(tmp_path: Path, figures: Figures) -> Iterator[tuple[ReplicatedService, Load]]:
    """The service on a fresh cluster, its clients placing and paying orders, payments made."""
    with replicated_service(tmp_path) as service:
        load = Load(service, figures)
        load.start()
        load.wait_for(
            lambda: len(load.acknowledged.payments) >= PAYMENTS_BEFORE,
            timeout=60,
            what="payments before the fault",
        )
        yield service, load


def run_through(
    service: ReplicatedService, load: Load, fault_at: float, *, within_s: float
) -> Recovery:
    """Keep the load on until it has succeeded again, then stop it and let every operation end."""
    acknowledged = load.acknowledged.count()
    load.wait_for(
        lambda: load.acknowledged.count() >= acknowledged + COMMANDS_AFTER,
        timeout=within_s + 30,
        what="commands acknowledged after the fault",
    )
    load.stop()
    recovery = Recovery(since=fault_at)
    recovery.all_ended_s = seconds_until_finished(
        service.database_url, since=fault_at, within_s=within_s
    )
    recovery.read(load.client)
    return recovery


def assert_exactly_once(found: FailoverAudit, load: Load, gone: int) -> None:
    assert found.acknowledged > PAYMENTS_BEFORE
    assert (found.lost, found.duplicates, found.double_charges) == (0, 0, 0)
    assert (found.orphan_charges, found.stuck, gone) == (0, 0, 0)
    assert load.refused == []


def assert_back_within(recovery: Recovery, goal_s: float) -> None:
    """Commands succeed again, and every operation has ended, within ``goal_s`` of the fault."""
    assert recovery.first_success_s is not None
    assert recovery.first_success_s <= goal_s
    assert recovery.all_ended_s is not None
    assert recovery.all_ended_s <= goal_s


def assert_fails_fast(recovery: Recovery) -> None:
    """Every request that met the failure was answered 503 at once: no other 5xx, no hang."""
    assert recovery.other_errors == 0
    # A request waits at most for its connection (DATABASE_CONNECT_TIMEOUT,
    # to each host in turn) or for a copy of its command (IDEMPOTENCY_WAIT).
    connect_timeout = settings.DATABASES["default"]["OPTIONS"]["connect_timeout"]
    assert recovery.longest_answer_s < 2 * connect_timeout + settings.IDEMPOTENCY_WAIT


@pytest.mark.parametrize("killed", ["machine", "postmaster"])
def test_the_primary_killed_under_load(tmp_path: Path, killed: str) -> None:
    """The primary's machine dies (a failover), or its postmaster alone (a restart in place).

    With the machine (Patroni, the postmaster, every backend) gone, the
    leader key lapses and Patroni promotes the standby. With the postmaster
    alone SIGKILLed, its Patroni, still holding the key, starts PostgreSQL
    again on the same node once its orphaned backends have gone.
    """
    figures = Figures(f"primary's {killed} killed")
    with under_load(tmp_path, figures) as (service, load):
        primary, standby = service.cluster.leader(), service.cluster.standby()

        killed_at = time.monotonic()
        if killed == "machine":
            primary.kill()
        else:
            os.kill(primary.postmaster_pid(), signal.SIGKILL)
        recovery = run_through(service, load, killed_at, within_s=FAILOVER_GOAL_S)
        gone = load.settle()
        found = FailoverFigures(
            f"PostgreSQL primary's {killed} killed (synchronous standby)",
            figures,
            recovery,
            goal_s=FAILOVER_GOAL_S,
        ).report(audit(service, load.acknowledged))
        leader = service.cluster.leader()

    assert leader is (standby if killed == "machine" else primary)
    assert_exactly_once(found, load, gone)
    assert recovery.unavailable > 0
    assert_fails_fast(recovery)
    assert_back_within(recovery, FAILOVER_GOAL_S)


def test_a_switchover_under_load(tmp_path: Path) -> None:
    figures = Figures("switchover")
    with under_load(tmp_path, figures) as (service, load):
        primary, standby = service.cluster.leader(), service.cluster.standby()

        asked_at = time.monotonic()
        service.cluster.switchover(to=standby)
        recovery = run_through(service, load, asked_at, within_s=SWITCHOVER_GOAL_S)
        gone = load.settle()
        found = FailoverFigures(
            "PostgreSQL switched over", figures, recovery, goal_s=SWITCHOVER_GOAL_S
        ).report(audit(service, load.acknowledged))
        # The old primary follows the new one, and is its synchronous standby.
        service.cluster.wait_until_replicated(synchronous=True)
        roles = (service.cluster.leader(), service.cluster.standby())

    assert roles == (standby, primary)
    assert_exactly_once(found, load, gone)
    assert_fails_fast(recovery)
    assert_back_within(recovery, SWITCHOVER_GOAL_S)


def test_the_standby_lost_under_load(tmp_path: Path) -> None:
    figures = Figures("standby lost")
    with under_load(tmp_path, figures) as (service, load):
        primary, standby = service.cluster.leader(), service.cluster.standby()

        lost_at = time.monotonic()
        standby.kill()
        # Patroni names no synchronous standby any more: commits go on alone.
        degraded_s = wait_until(
            lambda: synchronous_standby_names_are(service, ""),
            STANDBY_LOST_GOAL_S,
            interval=0.05,
            what="the primary going on alone",
        )
        recovery = run_through(service, load, lost_at, within_s=STANDBY_LOST_GOAL_S)
        standby.start()
        back_s = wait_until(
            lambda: synchronous_standby_names_are(service, standby.name),
            60,
            interval=0.05,
            what="the standby synchronous again",
        )
        gone = load.settle()
        report = FailoverFigures(
            "PostgreSQL synchronous standby lost",
            figures,
            recovery,
            goal_s=STANDBY_LOST_GOAL_S,
            extra=(
                f"alone after {degraded_s:.1f} s,"
                f" synchronous again {back_s:.1f} s after its restart"
            ),
        )
        found = report.report(audit(service, load.acknowledged))
        leader = service.cluster.leader()

    assert leader is primary
    assert_exactly_once(found, load, gone)
    # Commits waited for Patroni to let the standby go, and none failed.
    assert recovery.unavailable == 0
    assert recovery.other_errors == 0
    assert recovery.longest_answer_s < STANDBY_LOST_GOAL_S
    assert recovery.all_ended_s is not None
    assert recovery.all_ended_s <= STANDBY_LOST_GOAL_S


def synchronous_standby_names_are(service: ReplicatedService, names: str) -> Answer:
    """Whether the primary's ``synchronous_standby_names``, as Patroni sets it, are ``names``."""
    with psycopg.connect(service.database_url, autocommit=True) as db:
        row = db.execute("SHOW synchronous_standby_names").fetchone()
    assert row is not None
    return Answer(row[0] == names, f"synchronous_standby_names = {row[0]!r}")
