"""Rule 12 — what one principal can make the service keep is bounded.

Validation refusals are stored like every final answer (rule 1), and a
client chooses how many it sends and how large: without a bound, 50 KB
bodies of made-up members kept 87 KB a key, some 350 GB a day. Past
``IDEMPOTENCY_STORAGE_PER_PRINCIPAL`` a new key is refused before its
command starts; what is stored stays served.
"""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Sum
from django.test import Client
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries, Settings

from accounts.services import create_api_client
from idempotency import quota
from idempotency.models import IdempotencyKey, StorageUsage, StoredAnswer
from idempotency.retention import purge_expired_keys
from orders.models import Order
from tests.orders.test_query_counts import CREATE_ORDER_QUERIES
from tests.support.concurrency import run_concurrently
from tests.support.http import Api, problem

pytestmark = pytest.mark.django_db

# A validation error as large as a stored refusal gets: every one of 100
# lines wrong, each with long made-up members.
LINE = {"sku": "s" * 100, "qty": "many", **{f"{'u' * 60}{i:04d}": 0 for i in range(60)}}
LARGE_REFUSAL = {"customerId": 7, "currency": "rub", "items": [LINE] * 100}


def counted(api: Api) -> int:
    """What the principal's keys are counted for, by the running total."""
    usage = StorageUsage.objects.filter(principal=api.principal)
    total: int = usage.aggregate(total=Sum("bytes"))["total"]
    return total


def held(api: Api) -> int:
    """What the principal's keys hold, summed over the keys themselves."""
    total = 0
    for record in IdempotencyKey.objects.filter(principal=api.principal).select_related("answer"):
        total += quota.claim_bytes(
            key=record.key,
            method=record.request_method,
            path=record.request_path,
            field_digests=record.field_digests,
        ) + quota.answer_bytes(bytes(record.answer.body), record.answer.headers)
    return total


@pytest.fixture
def small_quota(settings: Settings) -> int:
    """Room for a few large refusals past the worst case of one key."""
    bound = quota.MAX_KEY_BYTES + 100_000
    settings.IDEMPOTENCY_STORAGE_PER_PRINCIPAL = bound
    return bound


def fill(api: Api) -> tuple[list[str], Any]:
    """Send large refusals under new keys until one is refused; the keys stored and the refusal."""
    stored: list[str] = []
    for i in range(100):
        response = api.post("/v1/orders", LARGE_REFUSAL, key=f"fill-{i}")
        if response.status_code != 400:
            return stored, response
        stored.append(f"fill-{i}")
    pytest.fail("100 large refusals were all stored")


def test_past_the_bound_a_new_key_is_refused_429_and_nothing_is_stored(
    api: Api, small_quota: int
) -> None:
    stored, refused = fill(api)
    keys_before, total_before = IdempotencyKey.objects.count(), counted(api)

    again = api.post("/v1/orders", LARGE_REFUSAL, key="new")

    assert len(stored) >= 4
    for response in (refused, again):
        assert response.status_code == 429
        assert problem(response)["error"] == "KeyQuotaExceeded"
        assert response["Content-Type"] == "application/problem+json"
        # When the bucket of the keys just stored ends.
        assert 1 <= int(response["Retry-After"]) <= (86400 + quota.bucket_width().total_seconds())
    assert IdempotencyKey.objects.count() == keys_before == len(stored)
    assert not IdempotencyKey.objects.filter(key="new").exists()
    assert counted(api) == total_before <= small_quota
    assert Order.objects.count() == 0


def test_replays_and_other_principals_are_served_past_the_bound(
    api: Api, other_api: Api, small_quota: int, order_body: dict[str, Any]
) -> None:
    first = api.post("/v1/orders", order_body, key="order")
    stored, refused = fill(api)

    replays = [api.post("/v1/orders", LARGE_REFUSAL, key=key) for key in stored]
    replayed_order = api.post("/v1/orders", order_body, key="order")
    conflict = api.post("/v1/orders", {**order_body, "currency": "USD"}, key="order")
    others = other_api.post("/v1/orders", order_body, key="order")

    assert refused.status_code == 429
    assert {r.status_code for r in replays} == {400}
    assert all(r["Idempotent-Replayed"] == "true" for r in replays)
    assert replayed_order["Idempotent-Replayed"] == "true"
    assert replayed_order.content == first.content
    # A conflict is not stored either: it is answered as before.
    assert problem(conflict)["error"] == "IdempotencyKeyConflict"
    assert others.status_code == 201
    assert Order.objects.count() == 2


def test_the_running_total_is_what_the_keys_hold(api: Api, order_body: dict[str, Any]) -> None:
    api.post("/v1/orders", order_body, key="created")
    api.post("/v1/orders", LARGE_REFUSAL, key="refused")
    api.post("/v1/orders", {}, key="empty")
    order_id = Order.objects.get().id
    api.post(f"/v1/orders/{order_id}/cancel", None, key="cancel")

    assert counted(api) == held(api)


def test_concurrent_commands_of_one_principal_count_every_key(
    transactional_db: None, catalog: None
) -> None:
    issued = create_api_client(tenant_slug="acme", name="busy")
    api = Api(client=Client(), token=issued.token, principal=issued.principal)
    body = {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}

    # Eight threads, each on its own database connection, so several shards
    # and the same bucket's rows are written at once.
    run_concurrently(
        8, lambda i: [api.post("/v1/orders", body, key=f"k-{i}-{n}") for n in range(5)]
    )

    assert IdempotencyKey.objects.count() == 40
    assert counted(api) == held(api)


def test_a_key_is_admitted_again_once_enough_keys_have_expired(
    api: Api, small_quota: int, order_body: dict[str, Any]
) -> None:
    fill(api)
    # A day later: every key and every bucket has ended.
    past = timezone.now() - timedelta(seconds=1)
    IdempotencyKey.objects.update(expires_at=past)
    StorageUsage.objects.update(expires_by=past)

    purge_expired_keys()
    response = api.post("/v1/orders", order_body, key="fill-0")

    assert StorageUsage.objects.filter(expires_by__lte=past).count() == 0
    assert response.status_code == 201
    assert response.get("Idempotent-Replayed") is None


def test_retry_after_is_when_the_bucket_that_makes_room_ends(api: Api, settings: Settings) -> None:
    now = timezone.now()
    width = quota.bucket_width()
    settings.IDEMPOTENCY_STORAGE_PER_PRINCIPAL = quota.MAX_KEY_BYTES + 1000
    for hours, size in ((1, 500), (2, 70_000), (3, 10_000)):
        StorageUsage.objects.create(
            principal=api.principal, expires_by=now + hours * width, shard=0, bytes=size
        )

    usage = quota.usage_of(api.principal, now=now, claim=900)

    # Room for a key of 900 bytes, whatever it answers, once the first two
    # buckets have ended: 10,000 bytes left, and some 15,000 to spare.
    assert usage.used == 80_500
    assert usage.retry_after == int((2 * width).total_seconds())


def test_a_claim_reads_the_total_in_its_own_statement(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    api.post("/v1/orders", order_body, key="warm")

    with django_assert_num_queries(CREATE_ORDER_QUERIES) as queries:
        api.post("/v1/orders", order_body, key="counted")

    claim = next(q["sql"] for q in queries.captured_queries if "ON CONFLICT" in q["sql"])
    store = next(
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith('INSERT INTO "idempotency_storedanswer')
    )
    assert "RETURNING" in claim
    assert "idempotency_storageusage" in claim
    assert "DO UPDATE" in store


def test_the_worst_case_of_a_key_is_what_the_docs_say() -> None:
    # idempotency/quota.py, docs/DEPLOYING.md and docs/SPECIFICATION.md state them.
    assert round(quota.MAX_KEY_BYTES / 1024, 1) == 79.4
    refusal = quota.MAX_KEY_BYTES - quota.MAX_ANSWER_BYTES + quota.MAX_REFUSAL_BYTES
    assert round(refusal / 1024, 1) == 23.4


def test_a_stored_answer_is_never_larger_than_its_bound(api: Api) -> None:
    api.post("/v1/orders", LARGE_REFUSAL, key="refused")

    answer = StoredAnswer.objects.get()

    assert answer.status == 400
    assert len(bytes(answer.body)) <= quota.MAX_REFUSAL_BYTES
    assert "more errors not listed" in json.loads(bytes(answer.body))["message"]
