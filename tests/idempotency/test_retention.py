"""Rule 10 — Retention: the purge deletes expired keys in batches, and stays out of commands' way.

test_rules.py checks the policy (a key kept for its TTL, the command and
the periodic task purging, an expired key being a new key). Here is the
purge itself (idempotency/retention.py):

- it deletes only expired keys, in batches of at most ``batch_size``, one
  statement each, until none is left, pausing between batches;
- against real transactions in other threads: a key another transaction
  holds (``SELECT ... FOR UPDATE``, or the conditional DELETE and new
  INSERT of a re-claim, uncommitted) is skipped, not waited for, and the
  re-claimed row is never deleted;
- an uncommitted purge makes neither a claim of a new key nor a replay
  wait; a re-claim of a key in the batch being deleted waits for that
  batch and then claims afresh.

A purge that waited for a lock would fail here rather than hang: its
connection's ``lock_timeout`` turns any wait into an error.
"""

import io
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django import Settings

from accounts.models import Principal
from idempotency import retention
from idempotency.models import IdempotencyKey, StoredAnswer
from idempotency.retention import purge_expired_keys
from tests.support.concurrency import run_concurrently, wait_for_lock_waiters
from tests.support.http import Api

# How long a test's thread waits for another's signal before failing: far
# above anything these steps take, so only a purge (or command) stuck on a
# lock reaches it.
EVENT_TIMEOUT = 10
# A purge that waits for a lock at all is a failure; this turns the wait
# into an error long before EVENT_TIMEOUT.
PURGE_LOCK_TIMEOUT = "2s"
TTL = timedelta(hours=24)


@pytest.fixture(autouse=True)
def no_pause(settings: Settings) -> None:
    """No pause between batches, but in the test of the pause."""
    settings.IDEMPOTENCY_PURGE_PAUSE = 0


def make_key(principal: Principal, key: str, *, expires_in: timedelta) -> IdempotencyKey:
    """A completed key of ``principal`` expiring ``expires_in`` from now (negative: expired)."""
    expires_at = timezone.now() + expires_in
    record = IdempotencyKey.objects.create(
        tenant_id=principal.tenant_id,
        principal=principal,
        key=key,
        request_method="POST",
        request_path="/v1/orders",
        fingerprint="0" * 64,
        created_at=expires_at - TTL,
        expires_at=expires_at,
    )
    StoredAnswer.objects.create(key=record, status=201, body=b"{}")
    return record


def keys() -> set[str]:
    return set(IdempotencyKey.objects.values_list("key", flat=True))


@contextmanager
def no_lock_waits() -> Iterator[None]:
    """This thread's connection errs instead of waiting for a lock."""
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = %s", [PURGE_LOCK_TIMEOUT])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


def purge_without_waiting(batch_size: int) -> int:
    with no_lock_waits():
        return purge_expired_keys(batch_size=batch_size)


def signalled(event: threading.Event) -> None:
    assert event.wait(timeout=EVENT_TIMEOUT), "the other thread never got there"


def reclaim(record: IdempotencyKey) -> IdempotencyKey:
    """What a request finding its key expired does (idempotency/commands.py).

    Delete the expired row on condition that it is still expired, then
    claim the key afresh: a new row, a new id, a new expiry.
    """
    now = timezone.now()
    _, deleted = IdempotencyKey.objects.filter(pk=record.pk, expires_at__lte=now).delete()
    assert deleted == {"idempotency.IdempotencyKey": 1, "idempotency.StoredAnswer": 1}
    return IdempotencyKey.objects.create(
        tenant_id=record.tenant_id,
        principal_id=record.principal_id,
        key=record.key,
        request_method=record.request_method,
        request_path=record.request_path,
        fingerprint=record.fingerprint,
        created_at=now,
        expires_at=now + TTL,
    )


def roles(*parts: Callable[[], Any]) -> Callable[[int], Any]:
    """``run_concurrently``'s ``fn``: thread ``i`` plays ``parts[i]``."""
    return lambda i: parts[i]()


# --- Batches -------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("expired", "batch_size", "statements"),
    [(5, 2, 3), (4, 2, 3), (0, 2, 1), (3, 5000, 1)],
)
def test_the_purge_deletes_expired_keys_in_batches_of_one_statement(
    api: Api, expired: int, batch_size: int, statements: int
) -> None:
    for i in range(expired):
        make_key(api.principal, f"old-{i}", expires_in=-timedelta(minutes=i + 1))
    make_key(api.principal, "live", expires_in=TTL)

    with CaptureQueriesContext(connection) as queries:
        purged = purge_expired_keys(batch_size=batch_size)

    deletes = [q["sql"] for q in queries.captured_queries if "DELETE" in q["sql"]]
    # The last: the storage totals' ended buckets (idempotency/quota.py).
    *batches, buckets = deletes
    assert buckets.startswith('DELETE FROM "idempotency_storageusage"')
    assert purged == expired
    assert keys() == {"live"}
    # Their answers went with them.
    assert list(StoredAnswer.objects.values_list("key__key", flat=True)) == ["live"]
    # Fewer than a full batch ends the purge; a full one asks once more.
    assert len(batches) == statements
    for sql in batches:
        # One statement a batch, the keys and their answers, oldest first,
        # passing over locked rows, and the expiry checked again on the rows
        # it deletes.
        assert sql.startswith("WITH gone AS (DELETE FROM")
        assert 'DELETE FROM "idempotency_storedanswer"' in sql
        assert f'ORDER BY "expires_at" LIMIT {batch_size} FOR UPDATE SKIP LOCKED' in sql
        assert sql.count('"expires_at" <=') == 2
    # No SELECT of ids ahead of the DELETE, and no row loaded into Python.
    assert not [q for q in queries.captured_queries if q["sql"].startswith("SELECT")]


@pytest.mark.django_db
def test_the_purge_never_deletes_unexpired_keys(api: Api, other_api: Api) -> None:
    for principal in (api.principal, other_api.principal):
        make_key(principal, "in-a-minute", expires_in=timedelta(minutes=1))
        make_key(principal, "in-an-hour", expires_in=timedelta(hours=1))
        make_key(principal, "fresh", expires_in=TTL)
    make_key(api.principal, "expired", expires_in=-timedelta(seconds=1))

    purged = purge_expired_keys(batch_size=1)

    assert purged == 1
    assert IdempotencyKey.objects.count() == 6
    assert keys() == {"in-a-minute", "in-an-hour", "fresh"}


@pytest.mark.django_db
def test_the_command_says_how_many_keys_it_purged_and_how_long_it_took(api: Api) -> None:
    for i in range(3):
        make_key(api.principal, f"old-{i}", expires_in=-timedelta(minutes=1))
    out = io.StringIO()

    call_command("purge_idempotency_keys", "--batch-size", "2", stdout=out)

    assert re.fullmatch(
        r"Purging expired idempotency keys, in batches of 2, 0 s apart\.\n"
        r"Purged 3 expired idempotency keys in \d+\.\d\d s"
        r" \([\d,]+ keys/s, 2 batches, the longest \d+ ms\)\.\n",
        out.getvalue(),
    )
    assert not IdempotencyKey.objects.exists()


@pytest.mark.django_db
def test_the_purge_pauses_between_batches_and_not_after_the_last(
    api: Api, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.IDEMPOTENCY_PURGE_PAUSE = 0.25
    pauses: list[float] = []
    monkeypatch.setattr(retention, "sleep", pauses.append)
    for i in range(5):
        make_key(api.principal, f"old-{i}", expires_in=-timedelta(minutes=1))

    purged = purge_expired_keys(batch_size=2)

    # Batches of 2, 2 and 1: a pause after each of the two full ones.
    assert purged == 5
    assert pauses == [0.25, 0.25]


# --- Concurrency: real threads, real transactions ----------------------------


@pytest.mark.django_db(transaction=True)
def test_the_purge_skips_a_key_locked_by_another_transaction(api: Api) -> None:
    held = make_key(api.principal, "held", expires_in=-timedelta(hours=2))
    make_key(api.principal, "free", expires_in=-timedelta(hours=1))
    make_key(api.principal, "live", expires_in=TTL)
    locked, purged = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            # What a request reading its key FOR UPDATE would hold.
            IdempotencyKey.objects.select_for_update().get(pk=held.pk)
            locked.set()
            signalled(purged)

    def purge() -> int:
        signalled(locked)
        try:
            # Batches of one: the oldest row, the held one, is passed over
            # in every batch, and the purge still reaches the next.
            return purge_without_waiting(batch_size=1)
        finally:
            purged.set()

    _, deleted = run_concurrently(2, roles(hold, purge))

    assert deleted == 1
    assert keys() == {"held", "live"}
    # Skipped, not lost: once released, the next purge takes it.
    assert purge_expired_keys() == 1
    assert keys() == {"live"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_the_purge_skips_a_key_being_reclaimed_and_never_deletes_the_new_claim(
    api: Api, outcome: str
) -> None:
    old = make_key(api.principal, "K", expires_in=-timedelta(hours=1))
    make_key(api.principal, "other", expires_in=-timedelta(hours=1))
    reclaimed, purged = threading.Event(), threading.Event()
    new_pk: list[int] = []

    def reclaim_and_hold() -> None:
        with transaction.atomic():
            new_pk.append(reclaim(old).pk)
            reclaimed.set()
            signalled(purged)
            if outcome == "rollback":
                transaction.set_rollback(True)

    def purge() -> int:
        signalled(reclaimed)
        try:
            return purge_without_waiting(batch_size=1)
        finally:
            purged.set()

    _, deleted = run_concurrently(2, roles(reclaim_and_hold, purge))
    left = IdempotencyKey.objects.get(key="K")
    again = purge_expired_keys()

    # The old row, which the re-claim held, was skipped; "other" went.
    assert deleted == 1
    assert not IdempotencyKey.objects.filter(key="other").exists()
    if outcome == "commit":
        # The new claim is kept, now and by every later purge.
        assert left.pk == new_pk[0]
        assert left.expires_at > timezone.now() + TTL - timedelta(minutes=5)
        assert again == 0
        assert IdempotencyKey.objects.get(key="K").pk == new_pk[0]
    else:
        # The re-claim rolled back: the old row is back, still expired, and
        # the next purge takes it.
        assert left.pk == old.pk
        assert again == 1
        assert not IdempotencyKey.objects.exists()


@pytest.mark.django_db
def test_a_reclaimed_key_is_never_purged(api: Api, order_body: dict[str, Any]) -> None:
    api.post("/v1/orders", order_body, key="K")
    IdempotencyKey.objects.update(expires_at=timezone.now())
    second = api.post("/v1/orders", order_body, key="K")

    purged = purge_expired_keys()
    replay = api.post("/v1/orders", order_body, key="K")

    assert second.status_code == 201
    assert purged == 0
    assert IdempotencyKey.objects.get(key="K").expires_at > timezone.now()
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == second.content


@pytest.mark.django_db(transaction=True)
def test_an_uncommitted_purge_makes_neither_a_claim_nor_a_replay_wait(
    api: Api, order_body: dict[str, Any]
) -> None:
    replayed = api.post("/v1/orders", order_body, key="live")
    for i in range(3):
        make_key(api.principal, f"old-{i}", expires_in=-timedelta(hours=1))
    holding, answered = threading.Event(), threading.Event()
    deleted: list[int] = []

    def purge_and_hold() -> None:
        with transaction.atomic():
            # Every expired row deleted and locked until this commits.
            deleted.append(purge_expired_keys(batch_size=2))
            holding.set()
            signalled(answered)

    def command() -> tuple[Any, Any]:
        signalled(holding)
        try:
            # A claim that waited for the purge would wait for ever (until
            # IDEMPOTENCY_WAIT made it a 409): the purge commits only after.
            return (
                api.post("/v1/orders", order_body, key="new"),
                api.post("/v1/orders", order_body, key="live"),
            )
        finally:
            answered.set()

    _, (claim, replay) = run_concurrently(2, roles(purge_and_hold, command))

    assert deleted == [3]
    assert claim.status_code == 201
    assert not claim.has_header("Idempotent-Replayed")
    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == replayed.content
    assert keys() == {"live", "new"}


@pytest.mark.django_db(transaction=True)
def test_a_reclaim_of_a_key_in_the_batch_being_purged_waits_for_it_then_claims_afresh(
    api: Api, order_body: dict[str, Any]
) -> None:
    first = api.post("/v1/orders", order_body, key="K")
    IdempotencyKey.objects.update(expires_at=timezone.now() - timedelta(hours=1))
    holding, waited = threading.Event(), threading.Event()

    def purge_and_hold() -> int:
        with transaction.atomic():
            purged = purge_expired_keys()
            holding.set()
            signalled(waited)
            return purged

    def command() -> Any:
        signalled(holding)
        return api.post("/v1/orders", order_body, key="K")

    def observe() -> None:
        signalled(holding)
        try:
            # The re-claim waits on the row the purge deleted: seen in
            # pg_stat_activity, from a connection of its own.
            wait_for_lock_waiters()
        finally:
            waited.set()

    purged, again, _ = run_concurrently(3, roles(purge_and_hold, command, observe))

    assert purged == 1
    assert again.status_code == 201
    assert not again.has_header("Idempotent-Replayed")
    assert again.content != first.content
    assert IdempotencyKey.objects.get(key="K").expires_at > timezone.now()
