"""What a failover costs with asynchronous replication (``make failover``): a demonstration.

Kills the primary of a Patroni cluster under load, as
tests/faults/test_failover.py does, ``FAILOVER_RUNS`` times (5) with a
synchronous standby and as many with an asynchronous one, and counts what
the clients had been told and the new primary no longer has. After each
kill the clients do what they would do next (tests/faults/failover.py,
``Load.settle``): they follow each accepted payment to its end and, for
one the service no longer knows, send the payment again under its key,
which is a new key again on the new primary. A double charge is the
provider's own ledger, kept outside the cluster, showing two charges for
one order; an orphan charge, one for a payment no row remembers.

With a synchronous standby every line must show 0 lost; with an
asynchronous one, whatever the standby had not received when the primary
died is gone. docs/RELIABILITY.md quotes the figures and explains them.

Each mode runs with the standby at each distance of
``FAILOVER_LINK_DELAYS_MS`` (``0 50 500``): every byte between the nodes is
held that many milliseconds on its way, and what is held when the primary's
machine dies is lost with it (tests.support.faults.DelayedLink). 0 is this
machine's loopback; 50 ms, a standby in another region; 500 ms, one that
runs behind, busy replaying or on a congested link. ``FAILOVER_MODES``
(``synchronous asynchronous``) chooses the modes. Not a test: what is lost
asynchronously depends on timing; the figures belong here, not in
assertions.
"""

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.failover import (
    FailoverAudit,
    FailoverFigures,
    Load,
    Recovery,
    audit,
    replicated_service,
)
from tests.faults.harness import Figures, seconds_until_finished

RUNS = int(os.environ.get("FAILOVER_RUNS", "5"))
MODES = os.environ.get("FAILOVER_MODES", "synchronous asynchronous").split()
# Milliseconds each byte of WAL takes to reach the standby (and each reply
# to come back): on this machine's loopback (0) a standby is never more
# than a fraction of a millisecond behind.
LINK_DELAYS_MS = [float(d) for d in os.environ.get("FAILOVER_LINK_DELAYS_MS", "0 50 500").split()]
PAYMENTS_BEFORE = 8
COMMANDS_AFTER = 10


@dataclass
class Totals:
    """One set-up's figures added up over its runs."""

    name: str
    found: list[FailoverAudit] = field(default_factory=list)
    recoveries: list[float] = field(default_factory=list)

    def line(self) -> str:
        runs = len(self.found)

        def total(name: str) -> str:
            values = [getattr(found, name) for found in self.found]
            hit = sum(1 for value in values if value)
            return f"{sum(values)}" + (f" (in {hit} of {runs} runs)" if hit else "")

        recovery = (
            f"{min(self.recoveries):.1f} to {max(self.recoveries):.1f} s"
            if self.recoveries
            else "-"
        )
        acknowledged = sum(found.acknowledged for found in self.found)
        return (
            f"{self.name}: {runs} runs, {acknowledged} acknowledged, lost {total('lost')},"
            f" sent again {sum(found.resent for found in self.found)},"
            f" double charges {total('double_charges')},"
            f" orphan charges {total('orphan_charges')}, duplicates {total('duplicates')},"
            f" stuck {total('stuck')}; back {recovery} after the kill"
        )


def kill_the_primary(
    var_dir: Path, *, synchronous: bool, link_delay_s: float
) -> tuple[FailoverAudit, Recovery, FailoverFigures]:
    """One run: the service on a fresh cluster, under load, its primary killed; the audit."""
    figures = Figures("failover")
    with replicated_service(var_dir, synchronous=synchronous, link_delay_s=link_delay_s) as service:
        load = Load(service, figures)
        load.start()
        load.wait_for(
            lambda: len(load.acknowledged.payments) >= PAYMENTS_BEFORE,
            60,
            what="payments before the kill",
        )
        killed_at = time.monotonic()
        service.cluster.leader().kill()
        acknowledged = load.acknowledged.count()
        load.wait_for(
            lambda: load.acknowledged.count() >= acknowledged + COMMANDS_AFTER,
            120,
            what="commands acknowledged after the kill",
        )
        load.stop()
        recovery = Recovery(since=killed_at)
        recovery.all_ended_s = seconds_until_finished(
            service.database_url, since=killed_at, within_s=120
        )
        load.settle()
        recovery.read(load.client)
        found = audit(service, load.acknowledged)
    return found, recovery, FailoverFigures("", figures, recovery, found=found)


def main() -> None:
    print(
        f"failover: the primary killed under load, {RUNS} runs each;"
        " lost = acknowledged to a client, then gone from the new primary"
    )
    totals = []
    for delay_ms in LINK_DELAYS_MS:
        for mode in MODES:
            tally = Totals(f"{mode} standby, WAL {delay_ms:g} ms on its way")
            for run in range(1, RUNS + 1):
                with tempfile.TemporaryDirectory(prefix="failover-") as var_dir:
                    found, recovery, figures = kill_the_primary(
                        Path(var_dir),
                        synchronous=mode == "synchronous",
                        link_delay_s=delay_ms / 1000,
                    )
                figures.scenario = f"{tally.name}, run {run}"
                print(figures.line(), flush=True)
                tally.found.append(found)
                if recovery.first_success_s is not None:
                    tally.recoveries.append(recovery.first_success_s)
            totals.append(tally)
    print()
    for tally in totals:
        print(tally.line())


if __name__ == "__main__":
    main()
