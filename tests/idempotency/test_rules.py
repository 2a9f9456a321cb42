"""The idempotency rules (docs/SPECIFICATION.md §3): a section per rule, through the HTTP API.

Each section is headed "Rule N — Name", as the rules are named:

- Rule 1 — Key: a command needs a key, of 1 to 255 visible ASCII characters.
- Rule 2 — Scope: a key belongs to one principal of one tenant.
- Rule 3 — Fingerprint: the same request, however its body is spelled
  (properties: test_fingerprint_properties.py, test_canonical_json.py).
- Rule 4 — First request: the first request claims the key, atomically.
- Rule 5 — Replay: a completed key answers its stored response, executing nothing.
- Rule 6 — Conflict: another request with the key is a 409 naming what differs.
- Rule 7 — In flight: a duplicate of a running command waits, then replays
  or is told to retry.
- Rule 8 — Exactly once: however many copies arrive, the command runs once
  (across server processes: tests/live/test_live_service.py; one charge per
  payment: tests/orders/test_payments.py).
- Rule 9 — Crash safety and one transaction: a process that dies or hangs
  leaves no stuck key (test_crash_safety.py).
- Rule 10 — Retention: a key is kept for its TTL, then is a new key.
"""

import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from idempotency.models import IdempotencyKey
from idempotency.tasks import purge_expired_keys
from orders.models import Order
from tests.support import probes
from tests.support.concurrency import run_concurrently
from tests.support.http import Api, ClientResponse, problem

pytestmark = pytest.mark.django_db


# --- Rule 1 — Key ------------------------------------------------------------


def test_missing_key_is_refused_and_nothing_happens(api: Api, order_body: dict[str, Any]) -> None:
    response = api.post("/v1/orders", order_body)

    assert response.status_code == 400
    assert problem(response)["error"] == "IdempotencyKeyRequired"
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


@pytest.mark.parametrize(
    "bad_key",
    [
        *("", "   ", "a b", "x" * 256, "ключ", "tab\there", '"unterminated', '"a\\x"', '""'),
        # A comma: what HTTP makes of a header sent twice (K, K) or of a list.
        *("K,K", "K,", ",K", '"K", "K"', '"a,b"'),
    ],
)
def test_malformed_key_is_refused_and_nothing_happens(
    api: Api, order_body: dict[str, Any], bad_key: str
) -> None:
    response = api.post("/v1/orders", order_body, key=bad_key)

    assert response.status_code == 400
    assert problem(response)["error"] == "IdempotencyKeyInvalid"
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


@pytest.mark.parametrize("good_key", ["k", "x" * 255, "!~{}[]\"'", "7f2c-44aa_01:Z"])
def test_any_visible_ascii_key_of_1_to_255_characters_is_accepted(
    api: Api, order_body: dict[str, Any], good_key: str
) -> None:
    response = api.post("/v1/orders", order_body, key=good_key)

    assert response.status_code == 201
    assert IdempotencyKey.objects.get().key == good_key


def test_the_header_sent_twice_is_refused_and_nothing_happens(
    api: Api, order_body: dict[str, Any]
) -> None:
    # Django's test client cannot send a header twice; the WSGI server joins
    # the lines as HTTP says (RFC 9110 §5.3), and this is what it hands over.
    # tests/hostile/ sends the two lines through gunicorn and nginx.
    first = api.post("/v1/orders", order_body, key="K")

    twice = api.post("/v1/orders", order_body, key="K, K")

    assert first.status_code == 201
    assert twice.status_code == 400
    assert problem(twice)["error"] == "IdempotencyKeyInvalid"
    assert Order.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1


def test_plain_and_structured_field_forms_name_the_same_key(
    api: Api, order_body: dict[str, Any]
) -> None:
    first = api.post("/v1/orders", order_body, key="7f2c-1")

    again = api.post("/v1/orders", order_body, key='"7f2c-1"')

    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert Order.objects.count() == 1


@pytest.mark.parametrize(
    ("prepare", "expected_status", "expected_error"),
    [
        (lambda api, body: api.post("/v1/orders", "{not json", key="K"), 400, "MalformedJson"),
        (
            lambda api, body: api.client.post(
                "/v1/orders", "customerId=1", content_type="text/plain", headers=api.headers("K")
            ),
            415,
            "UnsupportedMediaType",
        ),
        (
            lambda api, body: api.client.post(
                "/v1/orders",
                json.dumps(body),
                content_type="application/json",
                headers={"Authorization": "Bearer wrong", "Idempotency-Key": "K"},
            ),
            401,
            "AuthenticationFailed",
        ),
        (
            lambda api, body: api.post("/v1/orders", {**body, "pad": "x" * (1024 * 1024)}, key="K"),
            413,
            "PayloadTooLarge",
        ),
        (
            lambda api, body: api.post("/v1/orders", '{"a": 1, "a": 2}', key="K"),
            400,
            "MalformedJson",
        ),
        (
            lambda api, body: api.post("/v1/orders", '{"\\ud800": 1}', key="K"),
            400,
            "MalformedJson",
        ),
    ],
    ids=[
        "malformed-json",
        "media-type",
        "authentication",
        "too-large",
        "duplicate-member",
        "lone-surrogate",
    ],
)
def test_a_request_refused_before_the_command_starts_stores_no_key(
    api: Api,
    order_body: dict[str, Any],
    prepare: Callable[[Api, dict[str, Any]], ClientResponse],
    expected_status: int,
    expected_error: str,
) -> None:
    refused = prepare(api, order_body)

    assert refused.status_code == expected_status
    assert problem(refused)["error"] == expected_error
    assert IdempotencyKey.objects.count() == 0
    assert Order.objects.count() == 0
    fixed = api.post("/v1/orders", order_body, key="K")
    assert fixed.status_code == 201
    assert not fixed.has_header("Idempotent-Replayed")


def test_a_validation_error_is_a_final_outcome_stored_and_replayed(
    api: Api, order_body: dict[str, Any]
) -> None:
    order_body["items"][0]["qty"] = 0
    first = api.post("/v1/orders", order_body, key="K")

    again = api.post("/v1/orders", order_body, key="K")

    assert first.status_code == 400
    assert problem(first)["error"] == "ValidationError"
    assert "items" in problem(first)["details"]
    assert again.status_code == 400
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 0


# --- Rule 2 — Scope ----------------------------------------------------------


def test_the_same_key_from_another_principal_is_an_unrelated_key(
    api: Api, other_api: Api, stranger_api: Api, order_body: dict[str, Any]
) -> None:
    mine = api.post("/v1/orders", order_body, key="shared")

    colleague = other_api.post("/v1/orders", order_body, key="shared")
    stranger = stranger_api.post("/v1/orders", {**order_body, "customerId": "x"}, key="shared")
    mine_again = api.post("/v1/orders", order_body, key="shared")

    assert colleague.status_code == 201
    assert not colleague.has_header("Idempotent-Replayed")
    assert stranger.status_code == 201
    assert not stranger.has_header("Idempotent-Replayed")
    ids = {json.loads(r.content)["orderId"] for r in (mine, colleague, stranger)}
    assert len(ids) == 3
    assert mine_again.content == mine.content
    assert Order.objects.count() == 3


# --- Rule 3 — Fingerprint ----------------------------------------------------


def test_key_order_white_space_and_number_spelling_do_not_change_the_request(api: Api) -> None:
    first = api.post(
        "/v1/orders",
        '{"customerId":"c","items":[{"sku":"ABC","qty":2}],"currency":"RUB"}',
        key="K",
    )

    again = api.post(
        "/v1/orders",
        '{ "currency" : "RUB",\n "items": [ {"qty": 2.0, "sku": "ABC"} ], "customerId": "c" }',
        key="K",
    )

    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert Order.objects.count() == 1


# --- Rule 4 — First request --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_requests_claim_the_key_once(api: Api, order_body: dict[str, Any]) -> None:
    responses = run_concurrently(32, lambda i: api.post("/v1/orders", order_body, key="storm"))

    assert {r.status_code for r in responses} == {201}
    assert len({r.content for r in responses}) == 1
    assert sum(not r.has_header("Idempotent-Replayed") for r in responses) == 1
    assert Order.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1


# --- Rule 5 — Replay ---------------------------------------------------------


def test_a_replay_returns_the_stored_response_and_executes_nothing(
    api: Api, order_body: dict[str, Any]
) -> None:
    first = api.post("/v1/orders", order_body, key="K")
    Order.objects.update(customer_id="changed-since")

    again = api.post("/v1/orders", order_body, key="K")

    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again["Content-Type"] == first["Content-Type"] == "application/json"
    assert again["Location"] == first["Location"] == f"/v1/orders/{Order.objects.get().id}"
    assert again["Idempotent-Replayed"] == "true"
    assert not first.has_header("Idempotent-Replayed")
    assert Order.objects.count() == 1


# In a transaction of its own, as served: the rejection rolls the command
# back, and a second transaction stores it.
@pytest.mark.django_db(transaction=True)
def test_a_business_rejection_is_stored_and_replayed(api: Api, order_body: dict[str, Any]) -> None:
    order_body["items"][0]["sku"] = "NOPE"
    first = api.post("/v1/orders", order_body, key="K")

    again = api.post("/v1/orders", order_body, key="K")

    assert first.status_code == 422
    assert problem(first)["error"] == "UnknownSku"
    assert again.status_code == 422
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"


@pytest.mark.urls("tests.support.probes")
def test_a_failure_of_the_command_itself_is_a_final_500_stored_and_replayed(api: Api) -> None:
    first = api.post("/v1/probes/failing", {}, key="K")

    again = api.post("/v1/probes/failing", {}, key="K")

    assert first.status_code == 500
    body = problem(first)
    assert body["error"] == "InternalError"
    assert "RuntimeError" not in first.content.decode()
    assert again.status_code == 500
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    # The order the command wrote before failing was rolled back.
    assert Order.objects.count() == 0


@pytest.mark.urls("tests.support.probes")
def test_another_method_with_the_same_key_is_a_conflict(api: Api) -> None:
    api.post("/v1/probes/two-methods", {}, key="K")

    response = api.client.generic(
        "DELETE",
        "/v1/probes/two-methods",
        b"{}",
        content_type="application/json",
        headers=api.headers("K"),
    )

    assert response.status_code == 409
    assert problem(response)["details"]["mismatch"] == ["/method"]


@pytest.mark.urls("tests.support.probes")
@pytest.mark.django_db(transaction=True)
def test_a_database_failure_stores_nothing_and_the_retry_executes_once(api: Api) -> None:
    probes.database_failures_left.set()
    failed = api.post("/v1/probes/database-failure", {}, key="K")

    retried = api.post("/v1/probes/database-failure", {}, key="K")
    replayed = api.post("/v1/probes/database-failure", {}, key="K")

    assert failed.status_code == 503
    assert problem(failed)["error"] == "ServiceUnavailable"
    assert failed.has_header("Retry-After")
    assert retried.status_code == 201
    assert not retried.has_header("Idempotent-Replayed")
    assert replayed.content == retried.content
    assert replayed["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_commit_that_fails_stores_nothing_and_the_retry_executes_once(
    api: Api, order_body: dict[str, Any]
) -> None:
    # The store sends the transaction's COMMIT: a failure there (here a
    # deferred check, as a serialization failure would be) is the command's
    # database failing, not an answer.
    with commits_of_stored_answers_failing():
        failed = api.post("/v1/orders", order_body, key="K")
        assert IdempotencyKey.objects.count() == Order.objects.count() == 0

    retried = api.post("/v1/orders", order_body, key="K")

    assert failed.status_code == 503
    assert problem(failed)["error"] == "ServiceUnavailable"
    assert retried.status_code == 201
    assert Order.objects.count() == 1


@contextmanager
def commits_of_stored_answers_failing() -> Iterator[None]:
    """A deferred trigger that fails the COMMIT of every transaction that stores an answer."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION fail_the_commit() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'could not serialize access'"
            " USING ERRCODE = 'serialization_failure'; END $$;"
            " CREATE CONSTRAINT TRIGGER fail_the_commit"
            " AFTER INSERT ON idempotency_storedanswer DEFERRABLE INITIALLY DEFERRED"
            " FOR EACH ROW EXECUTE FUNCTION fail_the_commit()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER fail_the_commit ON idempotency_storedanswer;"
                " DROP FUNCTION fail_the_commit()"
            )


# --- Rule 6 — Conflict -------------------------------------------------------


def test_another_body_with_the_same_key_is_a_conflict_naming_what_differs(
    api: Api, order_body: dict[str, Any]
) -> None:
    api.post("/v1/orders", order_body, key="K")
    changed = {**order_body, "currency": "USD", "items": [{"sku": "ABC", "qty": 3}]}

    response = api.post("/v1/orders", changed, key="K")

    assert response.status_code == 409
    body = problem(response)
    assert body["error"] == "IdempotencyKeyConflict"
    assert body["message"] == "Same Idempotency-Key used with different request payload."
    assert body["idempotencyKey"] == "K"
    assert body["traceId"] == response["X-Request-ID"]
    assert body["details"]["mismatch"] == ["/currency", "/items/0/qty"]
    assert "USD" not in response.content.decode()
    assert not response.has_header("Idempotent-Replayed")
    assert Order.objects.count() == 1


def test_another_endpoint_or_path_parameter_with_the_same_key_is_a_conflict(
    api: Api, order_body: dict[str, Any]
) -> None:
    first = json.loads(api.post("/v1/orders", order_body, key="create").content)["orderId"]
    second = json.loads(api.post("/v1/orders", order_body, key="create-2").content)["orderId"]
    api.post(f"/v1/orders/{first}/cancel", {}, key="cancel")

    other_endpoint = api.post(f"/v1/orders/{first}/cancel", {}, key="create")
    other_parameter = api.post(f"/v1/orders/{second}/cancel", {}, key="cancel")

    assert other_endpoint.status_code == 409
    assert problem(other_endpoint)["details"]["mismatch"][0] == "/path"
    assert other_parameter.status_code == 409
    assert problem(other_parameter)["details"]["mismatch"] == ["/path"]
    assert Order.objects.get(id=second).status == Order.Status.PENDING


# --- Rule 7 — In flight ------------------------------------------------------


@pytest.mark.urls("tests.support.probes")
@pytest.mark.django_db(transaction=True)
def test_a_duplicate_waits_for_the_running_command_and_gets_its_replay(
    api: Api, slow_command: None
) -> None:
    def request(i: int) -> ClientResponse:
        if i == 1:
            # The duplicate: sent once the first is running, which it lets
            # finish while the duplicate is waiting on the key.
            assert probes.slow_command_started.wait(timeout=10)
            probes.slow_command_release.set()
        return api.post("/v1/probes/slow", {}, key="K")

    first, duplicate = run_concurrently(2, request)

    assert first.status_code == duplicate.status_code == 201
    assert duplicate.content == first.content
    assert duplicate["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


@pytest.mark.urls("tests.support.probes")
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_WAIT=0.2)
def test_a_duplicate_still_running_after_the_wait_is_told_to_retry(
    api: Api, slow_command: None
) -> None:
    def request(i: int) -> ClientResponse:
        if i == 0:
            return api.post("/v1/probes/slow", {}, key="K")
        assert probes.slow_command_started.wait(timeout=10)
        try:
            return api.post("/v1/probes/slow", {}, key="K")
        finally:
            probes.slow_command_release.set()

    first, duplicate = run_concurrently(2, request)
    retried = api.post("/v1/probes/slow", {}, key="K")

    assert duplicate.status_code == 409
    assert problem(duplicate)["error"] == "IdempotencyKeyInProgress"
    assert int(duplicate["Retry-After"]) >= 1
    assert first.status_code == 201
    assert retried.content == first.content
    assert retried["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


# --- Rule 8 — Exactly once ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_interleaved_storms_of_several_keys_each_execute_once(
    api: Api, order_body: dict[str, Any]
) -> None:
    keys = [f"key-{n}" for n in range(4)]

    responses = run_concurrently(
        32, lambda i: (keys[i % 4], api.post("/v1/orders", order_body, key=keys[i % 4]))
    )

    assert {r.status_code for _, r in responses} == {201}
    by_key: dict[str, set[str]] = {}
    for key, response in responses:
        by_key.setdefault(key, set()).add(json.loads(response.content)["orderId"])
    assert all(len(ids) == 1 for ids in by_key.values())
    assert len(set().union(*by_key.values())) == 4
    assert Order.objects.count() == 4


# --- Rule 9 — Crash safety and one transaction -------------------------------
#
# A process that dies or hangs inside a command, killed or stopped for real:
# tests/idempotency/test_crash_safety.py.


# --- Rule 10 — Retention -----------------------------------------------------


@override_settings(IDEMPOTENCY_KEY_TTL=600)
def test_a_key_is_kept_for_its_ttl(api: Api, order_body: dict[str, Any]) -> None:
    api.post("/v1/orders", order_body, key="K")

    record = IdempotencyKey.objects.get()

    assert record.expires_at - record.created_at == timedelta(seconds=600)


def test_purged_keys_are_new_keys(api: Api, order_body: dict[str, Any]) -> None:
    first = api.post("/v1/orders", order_body, key="K")
    kept = api.post("/v1/orders", order_body, key="kept")
    IdempotencyKey.objects.filter(key="K").update(expires_at=timezone.now())

    out = io.StringIO()
    call_command("purge_idempotency_keys", stdout=out)
    left = list(IdempotencyKey.objects.values_list("key", flat=True))
    again = api.post("/v1/orders", order_body, key="K")

    assert "Purged 1 " in out.getvalue()
    assert left == ["kept"]
    assert again.status_code == 201
    assert not again.has_header("Idempotent-Replayed")
    assert again.content != first.content
    assert api.post("/v1/orders", order_body, key="kept").content == kept.content
    assert Order.objects.count() == 3


def test_the_periodic_task_purges_expired_keys(api: Api, order_body: dict[str, Any]) -> None:
    api.post("/v1/orders", order_body, key="old")
    api.post("/v1/orders", order_body, key="new")
    IdempotencyKey.objects.filter(key="old").update(expires_at=timezone.now())

    purged = purge_expired_keys.run()

    assert purged == 1
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]
    schedule = {
        entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }
    assert schedule["idempotency.tasks.purge_expired_keys"] <= settings.IDEMPOTENCY_KEY_TTL


def test_an_expired_key_not_yet_purged_is_a_new_key(api: Api, order_body: dict[str, Any]) -> None:
    api.post("/v1/orders", order_body, key="K")
    IdempotencyKey.objects.update(expires_at=timezone.now())

    again = api.post("/v1/orders", order_body, key="K")

    assert again.status_code == 201
    assert not again.has_header("Idempotent-Replayed")
    assert Order.objects.count() == 2
    assert IdempotencyKey.objects.count() == 1
