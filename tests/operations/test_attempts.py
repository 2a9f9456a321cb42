"""Every operation ends: an attempt budget over every attempt, whatever ended it.

The kinds here are registered by the tests themselves, as an app registers
its own: the operations layer runs, retries and ends work it knows nothing
about (operations.registry).
"""

import json
import logging

import pytest
from django.db import transaction
from django.utils import timezone
from pytest_django import Settings

from accounts.models import Tenant
from observability.logging import json_formatter
from operations import registry
from operations.attempts import claim_operation
from operations.errors import TransientFailure
from operations.models import Operation
from operations.services import finish_operation, start_operation
from operations.sweep import sweep_lost_operations
from operations.tasks import run_operation
from tests.support.concurrency import FinishedOperation

pytestmark = pytest.mark.django_db(transaction=True)

QUICK = registry.RetryPolicy(first_delay=lambda: 0.01)


class Bug(Exception):
    """What no retry policy names: a bug in a handler."""


@pytest.fixture(autouse=True)
def own_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kinds registered by a test are gone after it."""
    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant.objects.create(slug="ops")


def started(tenant: Tenant, kind: str) -> Operation:
    """An operation of ``kind``, committed and published as a command would."""
    with transaction.atomic():
        return start_operation(tenant=tenant, kind=kind, result_id="thing_1")


def test_an_unexpected_exception_ends_the_operation_failed_after_exactly_the_budget(
    broker: None,
    worker: None,
    finished_operation: FinishedOperation,
    tenant: Tenant,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 3
    calls: list[int] = []

    @registry.register("test.buggy", result_path=lambda r: f"/v1/things/{r}", retry=QUICK)
    def buggy(operation: Operation) -> None:
        calls.append(operation.attempts)
        raise Bug("the secret internals of a bug")

    with caplog.at_level(logging.INFO):
        operation = finished_operation(started(tenant, "test.buggy").id)

    assert operation.status == Operation.Status.FAILED
    assert operation.error_code == "InternalError"
    # The client's message says nothing of the server's internals.
    assert "secret" not in operation.error_message
    assert calls == [1, 2, 3]
    assert operation.attempts == 3
    assert operation.publications == 3  # the first message and one per retry
    # Each attempt logged once, with its traceback, in the operation's trace.
    failures = [
        json.loads(json_formatter().format(r))
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "operation attempt failed unexpectedly"
    ]
    assert len(failures) == 3
    assert {f["trace_id"] for f in failures} == {operation.trace_id}
    assert all("Traceback" in f["exception"] and "Bug" in f["exception"] for f in failures)


def test_a_failure_the_policy_names_is_retried_with_backoff_until_the_budget(
    broker: None, tenant: Tenant, settings: Settings
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 4
    policy = registry.RetryPolicy(first_delay=lambda: 2.0, max_delay=5.0)

    @registry.register("test.unavailable", result_path=lambda r: r, retry=policy)
    def unavailable(operation: Operation) -> None:
        raise TransientFailure("the far side said 503")

    operation = started(tenant, "test.unavailable")
    waits = []
    for _ in range(4):
        before = timezone.now()
        # One attempt, as the worker that gets its message would make it.
        run_operation.run(operation_id=operation.id)
        row = Operation.objects.get(pk=operation.id)
        if row.is_finished:
            break
        # The sweep leaves a retry alone until its countdown is over, and
        # OPERATION_STALE_AFTER more.
        waits.append(round((row.republish_at - before).total_seconds() - 10))
        assert sweep_lost_operations() == 0

    assert waits == [2, 4, 5]  # doubling, capped at max_delay
    assert row.status == Operation.Status.FAILED
    assert (row.error_code, row.error_message) == ("Unavailable", "the far side said 503")
    assert row.attempts == 4


def test_a_message_after_the_end_changes_nothing(broker: None, tenant: Tenant) -> None:
    calls: list[int] = []

    @registry.register("test.once", result_path=lambda r: r, retry=QUICK)
    def once(operation: Operation) -> None:
        calls.append(operation.attempts)
        finish_operation(operation, succeeded=True)

    operation = started(tenant, "test.once")
    run_operation.run(operation_id=operation.id)
    ended = Operation.objects.get(pk=operation.id)

    run_operation.run(operation_id=operation.id)  # a redelivery, or a late copy
    again = Operation.objects.get(pk=operation.id)

    assert calls == [1]
    assert (again.status, again.attempts, again.updated_at) == (
        Operation.Status.SUCCEEDED,
        1,
        ended.updated_at,
    )


def test_a_worker_lost_during_the_last_attempt_ends_the_operation(
    broker: None, tenant: Tenant, settings: Settings
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 2
    calls: list[int] = []

    @registry.register("test.slow", result_path=lambda r: r, retry=QUICK)
    def slow(operation: Operation) -> None:
        calls.append(operation.attempts)
        raise TransientFailure("timed out")

    operation = started(tenant, "test.slow")
    run_operation.run(operation_id=operation.id)
    # The second attempt's worker dies holding it, and its lease lapses.
    settings.OPERATION_LEASE = 0
    assert claim_operation(operation.id) is not None
    assert sweep_lost_operations() == 1
    run_operation.run(operation_id=operation.id)

    ended = Operation.objects.get(pk=operation.id)
    assert calls == [1]  # the handler never runs past the budget
    assert ended.status == Operation.Status.FAILED
    assert ended.error_code == "InternalError"
    assert ended.attempts == 3
