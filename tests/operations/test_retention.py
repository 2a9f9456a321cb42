"""Ended operations are kept OPERATION_RETENTION, then purged; a processing one never is."""

import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone
from pytest_django import Settings

from operations.models import Operation
from operations.retention import purge
from operations.tasks import purge_ended_operations
from tests.support.http import Api, problem
from tests.support.live import ROOT, base_env

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def operation(api: Api, status: str, *, ended_ago: timedelta) -> Operation:
    """An operation of ``api``'s tenant, started and last written ``ended_ago`` ago."""
    made = Operation.objects.create(
        tenant=api.principal.tenant,
        kind="payment.charge",
        status=status,
        result_id=f"pay_{Operation.objects.count()}",
    )
    # update(), which leaves auto_now alone: the row as it was when it ended.
    when = timezone.now() - ended_ago
    Operation.objects.filter(pk=made.pk).update(created_at=when, updated_at=when)
    return made


def test_only_operations_ended_longer_than_the_retention_ago_are_purged(api: Api) -> None:
    old_success = operation(api, "succeeded", ended_ago=31 * DAY)
    old_failure = operation(api, "failed", ended_ago=31 * DAY)
    recent = operation(api, "failed", ended_ago=29 * DAY)
    ancient_processing = operation(api, "processing", ended_ago=365 * DAY)

    result = purge()

    assert (result.deleted, result.finished) == (2, True)
    assert set(Operation.objects.values_list("pk", flat=True)) == {
        recent.pk,
        ancient_processing.pk,
    }
    for gone in (old_success, old_failure):
        answer = api.get(f"/v1/operations/{gone.pk}")
        assert answer.status_code == 404
        assert problem(answer)["error"] == "NotFound"
    assert api.get(f"/v1/operations/{recent.pk}").status_code == 200
    assert api.get(f"/v1/operations/{ancient_processing.pk}").status_code == 200


def test_the_retention_is_the_setting(api: Api, settings: Settings) -> None:
    settings.OPERATION_RETENTION = 2 * 86400
    operation(api, "succeeded", ended_ago=3 * DAY)
    kept = operation(api, "succeeded", ended_ago=DAY)

    assert purge().deleted == 1
    assert list(Operation.objects.values_list("pk", flat=True)) == [kept.pk]


def test_a_run_deletes_in_batches_and_stops_at_its_bound(api: Api) -> None:
    made = [operation(api, "succeeded", ended_ago=(40 - n) * DAY) for n in range(5)]

    first = purge(batch_size=2, max_batches=2)

    assert (first.deleted, first.batches, first.finished) == (4, 2, False)
    # The longest ended went first; the next run takes the rest.
    assert list(Operation.objects.values_list("pk", flat=True)) == [made[4].pk]
    second = purge(batch_size=2, max_batches=2)
    assert (second.deleted, second.batches, second.finished) == (1, 1, True)
    assert not Operation.objects.exists()


def test_bad_bounds_are_refused_and_change_nothing(api: Api) -> None:
    operation(api, "succeeded", ended_ago=40 * DAY)

    with pytest.raises(ValueError, match="at least 1"):
        purge(batch_size=0)

    assert Operation.objects.count() == 1


def test_the_command_prints_what_it_did(api: Api) -> None:
    for _ in range(3):
        operation(api, "succeeded", ended_ago=31 * DAY)
    operation(api, "processing", ended_ago=31 * DAY)
    out = StringIO()

    call_command("purge_operations", "--batch-size", "2", "--max-batches", "1", stdout=out)

    assert out.getvalue().startswith("Purged 2 operations ended more than 30 days ago in "), (
        out.getvalue()
    )
    assert "(1 batches of at most 2). Stopped at 1 batches: more remain" in out.getvalue()
    out = StringIO()
    call_command("purge_operations", stdout=out)
    assert out.getvalue().startswith("Purged 1 operations ended more than 30 days ago")
    assert "Stopped" not in out.getvalue()
    assert list(Operation.objects.values_list("status", flat=True)) == ["processing"]


def test_the_periodic_task_purges_and_beat_runs_it_hourly(api: Api) -> None:
    operation(api, "failed", ended_ago=31 * DAY)
    kept = operation(api, "succeeded", ended_ago=DAY)

    purged = purge_ended_operations.run()

    assert purged == 1
    assert list(Operation.objects.values_list("pk", flat=True)) == [kept.pk]
    schedule = {
        entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }
    assert schedule["operations.tasks.purge_ended_operations"] == 3600.0


def settings_in_a_fresh_process(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "--no-imports",
            "-c",
            "from django.conf import settings; print(settings.OPERATION_RETENTION)",
        ],
        cwd=ROOT,
        env=base_env(VAR_DIR=str(tmp_path), **env),
        capture_output=True,
        text=True,
    )


def test_a_retention_shorter_than_the_key_ttl_is_refused_at_start(tmp_path: Path) -> None:
    refused = settings_in_a_fresh_process(
        tmp_path, IDEMPOTENCY_KEY_TTL="86400", OPERATION_RETENTION="3600"
    )
    equal = settings_in_a_fresh_process(
        tmp_path, IDEMPOTENCY_KEY_TTL="86400", OPERATION_RETENTION="86400"
    )

    assert refused.returncode != 0
    assert "ImproperlyConfigured: OPERATION_RETENTION (3600 s) is below IDEMPOTENCY_KEY_TTL" in (
        refused.stderr
    )
    assert (equal.returncode, equal.stdout.strip()) == (0, "86400")
