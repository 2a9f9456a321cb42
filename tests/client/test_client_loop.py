"""The client's own loop: same key on every attempt, retries as the policy says, bounded, typed.

Each test scripts the answers of an ``httpx.MockTransport`` (fails N times,
then answers) and runs the client on fake time, so the retries happen at
once and every sleep is recorded. Nothing here says how the real service
behaves; tests/live and tests/faults do that against the running service.
"""

import asyncio
import contextlib
import json
import uuid
from pathlib import Path

import httpx
import pytest
from order_service_client import (
    FAILOVER_GOAL_S,
    AsyncOrderServiceClient,
    AuthenticationFailed,
    CommandResult,
    IdempotencyKeyConflict,
    KeyLifetimeOver,
    MemoryKeyStore,
    OperationTimeout,
    OrderServiceClient,
    RetriesExhausted,
    RetryEvent,
    RetryPolicy,
    ServerError,
    SQLiteKeyStore,
    Unprocessable,
    ValidationFailed,
)

from tests.client.fakes import (
    BASE_URL,
    CREATED,
    ORDER,
    ORDER_LINES,
    TOKEN,
    FakeTime,
    Outcome,
    Script,
    answer,
    client_for,
    fail,
    problem,
    published_policy,
)


def create(script: Script, *, key: str | None = None, intent: str | None = None) -> CommandResult:
    with client_for(script) as client:
        return client.create_order(
            customer_id="c-1", currency="RUB", items=ORDER_LINES, key=key, intent=intent
        )


# One key per call, the same on every attempt.


def test_every_attempt_carries_the_same_key_and_body_until_an_answer() -> None:
    time = FakeTime()
    script = Script(
        fail(httpx.ConnectError),
        problem(503, "ServiceUnavailable", headers={"Retry-After": "2"}),
        fail(httpx.ReadTimeout),
        fail(httpx.RemoteProtocolError),
        problem(409, "IdempotencyKeyInProgress", headers={"Retry-After": "1"}),
        answer(201, CREATED, headers={"Location": "/v1/orders/ord_1"}),
        time=time,
    )

    result = create(script)

    assert result.status == 201
    assert result.body == CREATED
    assert result.attempts == 6
    assert not result.replayed
    assert result.headers["Location"] == "/v1/orders/ord_1"
    assert uuid.UUID(result.key).version == 4
    assert script.keys == [result.key] * 6
    assert len({sent.request.content for sent in script.sent}) == 1
    assert json.loads(script.sent[0].request.content) == {
        "customerId": "c-1",
        "items": ORDER_LINES,
        "currency": "RUB",
    }
    # Five retries, five sleeps, no real time spent.
    assert len(time.sleeps) == 5


def test_each_call_gets_a_new_key() -> None:
    script = Script(answer(201, CREATED), time=FakeTime())

    first, second = create(script), create(script)

    assert first.key != second.key
    assert script.keys == [first.key, second.key]


def test_a_key_the_caller_passes_is_sent_as_it_is() -> None:
    script = Script(fail(httpx.ConnectError), answer(201, CREATED), time=FakeTime())

    result = create(script, key="order-cart-81")

    assert result.key == "order-cart-81"
    assert script.keys == ["order-cart-81", "order-cart-81"]


def test_a_replay_is_reported() -> None:
    script = Script(answer(201, CREATED, headers={"Idempotent-Replayed": "true"}), time=FakeTime())

    assert create(script, key="k").replayed


@pytest.mark.parametrize("key", ["", "has space", "é", "x" * 256, "a,b"])
def test_a_key_the_service_would_refuse_is_refused_before_sending(key: str) -> None:
    script = Script(answer(201, CREATED), time=FakeTime())

    with pytest.raises(ValueError, match="Idempotency-Key"):
        create(script, key=key)

    assert script.sent == []


def test_the_requests_are_authenticated_json_commands() -> None:
    script = Script(answer(202, {"status": "processing", "operationId": "op_1"}), time=FakeTime())

    with client_for(script) as client:
        client.pay(order_id="ord_1", amount=3980, currency="RUB", payment_method="pm_card_ok")
        client.cancel("ord/../1", reason="changed my mind")

    pay, cancel = (sent.request for sent in script.sent)
    assert (pay.method, pay.url.path) == ("POST", "/v1/payments")
    assert pay.headers["Authorization"] == f"Bearer {TOKEN}"
    assert pay.headers["Content-Type"] == "application/json"
    assert pay.headers["User-Agent"].startswith("order-service-client/0.1.0 ")
    assert json.loads(pay.content) == {
        "orderId": "ord_1",
        "amount": 3980,
        "currency": "RUB",
        "paymentMethod": "pm_card_ok",
    }
    # An id is one path segment, whatever it holds.
    assert cancel.url.raw_path == b"/v1/orders/ord%2F..%2F1/cancel"
    assert json.loads(cancel.content) == {"reason": "changed my mind"}


# What is retried, and what is not.


def test_retry_events_say_what_failed_and_how_long_the_client_waits() -> None:
    time = FakeTime()
    events: list[RetryEvent] = []
    script = Script(
        fail(httpx.ConnectError),
        problem(503, "ServiceUnavailable"),
        problem(409, "IdempotencyKeyInProgress"),
        problem(429, "Throttled"),
        answer(201, CREATED),
        time=time,
    )

    with client_for(script, on_retry=events.append) as client:
        result = client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES)

    assert [event.reason for event in events] == [
        "ConnectError",
        "503",
        "IdempotencyKeyInProgress",
        "429",
    ]
    assert [event.attempt for event in events] == [1, 2, 3, 4]
    assert [event.delay for event in events] == time.sleeps
    assert {(event.method, event.path, event.key) for event in events} == {
        ("POST", "/v1/orders", result.key)
    }


def test_retry_after_is_slept_at_least() -> None:
    time = FakeTime()
    script = Script(
        problem(503, "ServiceUnavailable", headers={"Retry-After": "2"}),
        problem(409, "IdempotencyKeyInProgress", headers={"Retry-After": "7"}),
        answer(201, CREATED),
        time=time,
    )

    create(script)

    assert time.sleeps[0] >= 2
    # More than max_delay: the server's word is not capped.
    assert time.sleeps[1] >= 7
    assert [sent.at for sent in script.sent][1:] == pytest.approx(
        [time.sleeps[0], time.sleeps[0] + time.sleeps[1]]
    )


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (400, "ValidationError", ValidationFailed),
        (401, "AuthenticationFailed", AuthenticationFailed),
        (409, "IdempotencyKeyConflict", IdempotencyKeyConflict),
        (422, "UnknownSku", Unprocessable),
    ],
)
def test_a_final_4xx_is_raised_at_once(status: int, code: str, error: type[Exception]) -> None:
    time = FakeTime()
    script = Script(problem(status, code), answer(201, CREATED), time=time)

    with pytest.raises(error):
        create(script)

    assert len(script.sent) == 1
    assert time.sleeps == []


def test_a_first_500_is_retried_under_the_same_key_and_its_replay_is_final() -> None:
    # The service stores a 500 as the command's answer: the retry replays
    # it, marked, and executes nothing. Only the marked one is final.
    time = FakeTime()
    script = Script(
        problem(500, "InternalError"),
        problem(500, "InternalError", headers={"Idempotent-Replayed": "true"}),
        answer(201, CREATED),
        time=time,
    )

    with pytest.raises(ServerError) as raised:
        create(script)

    assert raised.value.replayed
    assert raised.value.status == 500
    assert len(script.sent) == 2
    assert len(set(script.keys)) == 1
    assert len({sent.request.content for sent in script.sent}) == 1


def test_a_500_that_is_no_replay_is_no_answer_of_the_command() -> None:
    # A proxy's 500 in front of the service: the retry learns the command's answer.
    proxy_error = answer(500, {"detail": "upstream failed"})
    script = Script(proxy_error, answer(201, CREATED), time=FakeTime())

    result = create(script)

    assert result.status == 201
    assert result.attempts == 2
    assert script.keys == [result.key, result.key]


def test_a_request_the_client_cannot_send_is_not_retried() -> None:
    script = Script(fail(httpx.UnsupportedProtocol), time=FakeTime())

    with pytest.raises(httpx.UnsupportedProtocol):
        create(script)

    assert len(script.sent) == 1


def test_reads_are_retried_and_carry_no_key() -> None:
    script = Script(
        fail(httpx.ReadError), problem(502, "BadGateway"), answer(200, ORDER), time=FakeTime()
    )

    with client_for(script) as client:
        order = client.get_order("ord_1")

    assert order == ORDER
    assert script.keys == [None, None, None]
    assert {sent.request.url.path for sent in script.sent} == {"/v1/orders/ord_1"}


# Bounded: attempts and deadline.


def test_max_attempts_is_respected() -> None:
    time = FakeTime()
    script = Script(problem(503, "ServiceUnavailable"), time=time)

    client = client_for(script, retry=RetryPolicy(max_attempts=3))

    with client, pytest.raises(RetriesExhausted) as raised:
        client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, key="k-3")

    exhausted = raised.value
    assert len(script.sent) == 3
    assert len(time.sleeps) == 2
    assert exhausted.attempts == 3
    assert exhausted.key == "k-3"
    assert (exhausted.method, exhausted.path) == ("POST", "/v1/orders")
    assert isinstance(exhausted.last_error, ServerError)
    assert exhausted.__cause__ is exhausted.last_error
    assert exhausted.last_response is not None
    assert exhausted.last_response.status_code == 503
    assert "outcome is unknown" in str(exhausted)


@pytest.mark.parametrize(
    ("outcome", "latency"),
    [
        # Each attempt hangs 4 s before failing: starts at 0, 4+ and 8+ at most.
        (fail(httpx.ReadTimeout), 4.0),
        # Each answer asks for 3 s: starts at 0, 3+, 6+ and 9+, never at 12.
        (problem(503, "ServiceUnavailable", headers={"Retry-After": "3"}), 0.0),
    ],
    ids=["slow-failures", "retry-after"],
)
def test_no_attempt_starts_after_the_deadline(outcome: Outcome, latency: float) -> None:
    time = FakeTime()
    script = Script(outcome, time=time, latency=latency)
    policy = RetryPolicy(max_attempts=100, deadline=10.0)

    with client_for(script, retry=policy) as client, pytest.raises(RetriesExhausted) as raised:
        client.get_order("ord_1")

    assert all(sent.at < 10.0 for sent in script.sent)
    assert len(script.sent) >= 3
    assert raised.value.attempts == len(script.sent)
    # It gave up rather than sleep past the deadline.
    assert time.now < 10.0 + latency


def test_the_last_error_of_a_read_without_answers_is_the_transport_error() -> None:
    script = Script(fail(httpx.ReadTimeout), time=FakeTime())

    client = client_for(script, retry=RetryPolicy(max_attempts=2))

    with client, pytest.raises(RetriesExhausted) as raised:
        client.get_order("ord_1")

    assert isinstance(raised.value.last_error, httpx.ReadTimeout)
    assert raised.value.last_response is None
    assert raised.value.key is None
    assert "outcome is unknown" not in str(raised.value)


def test_each_attempt_times_out_by_the_deadline() -> None:
    time = FakeTime()
    script = Script(fail(httpx.ReadTimeout), time=time, latency=4.0)
    policy = RetryPolicy(max_attempts=100, deadline=10.0)

    with client_for(script, retry=policy) as client, pytest.raises(RetriesExhausted):
        client.get_order("ord_1")

    for sent in script.sent:
        timeout = sent.request.extensions["timeout"]
        assert timeout["read"] <= 10.0 - sent.at + 1e-9
        assert timeout["connect"] <= 5.0


def test_a_retry_after_beyond_the_deadline_is_not_slept() -> None:
    time = FakeTime()
    script = Script(
        problem(503, "ServiceUnavailable", headers={"Retry-After": "3600"}),
        answer(201, CREATED),
        time=time,
    )

    with pytest.raises(RetriesExhausted) as raised:
        create(script)

    assert raised.value.attempts == 1
    assert time.sleeps == []


# The default budget: time enough for a failover, never past the key's retention.


def down_until(time: FakeTime, until: float, outage: Outcome) -> Outcome:
    """``outage`` for every request sent before ``until`` on the fake clock, then ``201``."""

    def respond(request: httpx.Request) -> httpx.Response:
        return outage(request) if time.now < until else answer(201, CREATED)(request)

    return respond


@pytest.mark.parametrize(
    "outage",
    [
        # The dead primary's address refuses at once: the fastest failure.
        fail(httpx.ConnectError),
        # The service answers at once, 503 with Retry-After, as it does
        # while its database is away (docs/RELIABILITY.md).
        problem(503, "ServiceUnavailable", headers={"Retry-After": "2"}),
    ],
    ids=["refused", "503"],
)
def test_the_default_policy_outlasts_a_failover(outage: Outcome) -> None:
    # The failover's goal: commands are answered again 30 s after the
    # primary's death (19.3 to 21.5 s measured).
    time = FakeTime()
    script = Script(down_until(time, FAILOVER_GOAL_S, outage), time=time)

    result = create(script, key="k-failover")

    assert result.status == 201
    assert script.keys == ["k-failover"] * len(script.sent)
    # More than the eight attempts a count-bounded default would have
    # allowed: they were spent long before the new primary served.
    assert result.attempts > 8
    assert script.sent[7].at < FAILOVER_GOAL_S


def test_the_default_policy_gives_up_at_its_deadline_however_fast_the_failures() -> None:
    time = FakeTime()
    script = Script(fail(httpx.ConnectError), time=time)

    with pytest.raises(RetriesExhausted) as raised:
        create(script, key="k-down")

    deadline = RetryPolicy().deadline
    assert deadline >= 2 * FAILOVER_GOAL_S
    assert all(sent.at < deadline for sent in script.sent)
    assert raised.value.elapsed < deadline
    # It kept trying into the deadline's last stretch, not only at its start.
    assert script.sent[-1].at > deadline - RetryPolicy().max_delay


def test_an_intents_retries_stop_at_its_keys_retention_since_its_first_use() -> None:
    # The service may forget the key `retention` after its first request:
    # a retry under it after that would run the command again.
    time = FakeTime()
    keys = MemoryKeyStore(retention=100.0, clock=time.clock)
    script = Script(problem(503, "ServiceUnavailable", headers={"Retry-After": "1"}), time=time)

    def run(client: OrderServiceClient, stopped_by: type[Exception]) -> None:
        with pytest.raises(stopped_by):
            client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="cart")

    with client_for(script, key_store=keys) as client:
        run(client, RetriesExhausted)
        first_run = len(script.sent)
        time.now = 90.0
        run(client, KeyLifetimeOver)
        time.now = 100.0
        run(client, RetriesExhausted)

    first_key = script.sent[0].key
    under_first_key = [sent for sent in script.sent if sent.key == first_key]
    assert script.sent[first_run - 1].at < 60.0
    assert script.sent[first_run].at == 90.0
    assert all(sent.at < 100.0 for sent in under_first_key)
    assert len(under_first_key) > first_run + 5
    # At 100 s the intent is a new action, under a new key.
    assert script.sent[-1].key != first_key


def test_a_calls_own_key_is_retried_no_longer_than_the_retention() -> None:
    time = FakeTime()
    keys = MemoryKeyStore(retention=20.0, clock=time.clock)
    script = Script(fail(httpx.ConnectError), time=time)
    client = client_for(script, key_store=keys)

    with client, pytest.raises(KeyLifetimeOver) as raised:
        client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, key="k-own")

    assert all(sent.at < 20.0 for sent in script.sent)
    assert script.sent[-1].at > 10.0
    assert raised.value.attempts == len(script.sent)
    assert isinstance(raised.value.last_error, httpx.ConnectError)


# The service's published policy: its retention, not the client's guess.


def test_the_policy_is_read_before_the_first_command_and_again_after_its_max_age() -> None:
    time = FakeTime()
    script = Script(
        answer(201, CREATED), time=time, policy=published_policy(retention=86400, max_age=300)
    )

    with client_for(script) as client:
        for now in (0.0, 100.0, 299.0, 300.0, 450.0):
            time.now = now
            client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES)
        policy = client.policy()

    assert [read.at for read in script.policy_reads] == [0.0, 300.0]
    assert policy is not None
    assert policy.retention_seconds == 86400
    assert ("POST", "/v1/orders") in policy.commands


def test_retries_stop_at_the_published_retention_with_the_reason_and_what_to_do() -> None:
    # The service keeps keys 30 s: the 60 s deadline would outlast them.
    time = FakeTime()
    script = Script(
        problem(503, "ServiceUnavailable", headers={"Retry-After": "1"}),
        time=time,
        policy=published_policy(retention=30),
    )

    with client_for(script) as client, pytest.raises(KeyLifetimeOver) as raised:
        client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, key="k-30")

    assert all(sent.at < 30.0 for sent in script.sent)
    # The next would have waited Retry-After (1 s) and a jitter of up to 5 s.
    assert script.sent[-1].at > 30.0 - 1.0 - RetryPolicy().max_delay
    assert raised.value.key == "k-30"
    assert raised.value.retention == 30.0
    assert isinstance(raised.value.last_error, ServerError)
    assert "start it again under a new key" in str(raised.value)


def test_an_intent_rerun_past_the_published_retention_sends_nothing_under_its_key() -> None:
    # The key store keeps the intent's key 24 h; the service forgets it after 100 s.
    time = FakeTime()
    keys = MemoryKeyStore(clock=time.clock)
    script = Script(
        problem(503, "ServiceUnavailable", headers={"Retry-After": "1"}),
        time=time,
        policy=published_policy(retention=100),
    )

    with client_for(script, key_store=keys) as client:
        with pytest.raises(RetriesExhausted):
            client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="a")
        sent_before = len(script.sent)
        time.now = 150.0
        with pytest.raises(KeyLifetimeOver) as raised:
            client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="a")

    assert len(script.sent) == sent_before
    assert raised.value.attempts == 0
    assert raised.value.first_used_ago == 150.0
    assert raised.value.key == script.sent[0].key


def test_a_policy_that_could_not_be_read_is_asked_for_again_at_the_next_command() -> None:
    time = FakeTime()
    script = Script(answer(201, CREATED), time=time, policy=fail(httpx.ConnectError))

    with client_for(script) as client:
        client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES)
        client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES)
        policy = client.policy()

    assert len(script.policy_reads) == 3
    assert policy is None


# Intents: keys that outlive a call, and a crash.


def test_a_crashed_intent_resumes_with_its_key_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    unreachable = Script(fail(httpx.ConnectError), time=FakeTime())
    before = client_for(unreachable, key_store=SQLiteKeyStore(path), retry=RetryPolicy(2))
    with before, pytest.raises(RetriesExhausted):
        before.create_order(
            customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="order:cart-81"
        )
    # The process dies here; a new one runs the same code.
    back = Script(answer(201, CREATED, headers={"Idempotent-Replayed": "true"}), time=FakeTime())
    store = SQLiteKeyStore(path)

    with client_for(back, key_store=store) as client:
        result = client.create_order(
            customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="order:cart-81"
        )

    assert back.keys == [unreachable.keys[0]] == [result.key]
    assert result.replayed
    # Answered, and kept: a rerun of the same code must replay this answer too.
    assert store.key_for("order:cart-81") == result.key


def test_an_intent_run_twice_sends_one_key_and_gets_the_first_answer_again(
    tmp_path: Path,
) -> None:
    # Two runs of one program, each answered: the second, or a run after a
    # crash between the answer and the program's own record of it, must not
    # place a second order.
    path = tmp_path / "keys.sqlite3"
    runs = [
        Script(answer(201, CREATED), time=FakeTime()),
        Script(answer(201, CREATED, headers={"Idempotent-Replayed": "true"}), time=FakeTime()),
    ]
    results = []
    for script in runs:
        with client_for(script, key_store=SQLiteKeyStore(path)) as client:
            results.append(
                client.create_order(
                    customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="order:cart-81"
                )
            )

    first, second = results
    assert runs[0].keys == runs[1].keys == [first.key]
    assert second.key == first.key
    assert (first.replayed, second.replayed) == (False, True)


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (answer(201, CREATED), None),
        (problem(422, "UnknownSku"), Unprocessable),
        (problem(400, "ValidationError"), ValidationFailed),
        (problem(500, "InternalError", headers={"Idempotent-Replayed": "true"}), ServerError),
    ],
    ids=["201", "422", "400-validation", "500-replayed"],
)
def test_an_intent_keeps_its_key_after_a_final_answer(
    outcome: Outcome, error: type[Exception] | None
) -> None:
    # Stored under the key: a rerun replays the same answer, executing nothing.
    store = MemoryKeyStore()
    key = store.key_for("order:cart-81")
    script = Script(outcome, time=FakeTime())

    raised = contextlib.nullcontext() if error is None else pytest.raises(error)
    with client_for(script, key_store=store) as client, raised:
        client.create_order(
            customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="order:cart-81"
        )

    assert script.keys == [key]
    assert store.key_for("order:cart-81") == key


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        # Refused before the command ran: an earlier, lost attempt may have
        # done it, so the intent must retry under the same key.
        (problem(401, "AuthenticationFailed"), AuthenticationFailed),
        (problem(409, "IdempotencyKeyConflict"), IdempotencyKeyConflict),
        (problem(503, "ServiceUnavailable"), RetriesExhausted),
        (fail(httpx.ConnectError), RetriesExhausted),
    ],
    ids=["401", "409-key-conflict", "503-exhausted", "no-answer-exhausted"],
)
def test_an_intent_keeps_its_key_while_the_outcome_is_open(
    outcome: Outcome, error: type[Exception]
) -> None:
    store = MemoryKeyStore()
    key = store.key_for("order:cart-81")
    script = Script(outcome, time=FakeTime())

    client = client_for(script, key_store=store, retry=RetryPolicy(2))

    with client, pytest.raises(error):
        client.create_order(
            customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="order:cart-81"
        )

    assert store.key_for("order:cart-81") == key


def test_a_key_and_an_intent_together_are_refused() -> None:
    script = Script(answer(201, CREATED), time=FakeTime())

    with pytest.raises(ValueError, match="not both"):
        create(script, key="k", intent="order:cart-81")

    assert script.sent == []


# Polling and pages.


def test_wait_polls_after_retry_after_until_the_operation_is_final() -> None:
    time = FakeTime()
    processing = {"id": "op_1", "status": "processing"}
    succeeded = {"id": "op_1", "status": "succeeded", "resultId": "pay_1"}
    script = Script(
        answer(200, processing, headers={"Retry-After": "1"}),
        answer(200, processing, headers={"Retry-After": "2"}),
        answer(200, succeeded),
        time=time,
    )
    accepted = CommandResult(
        status=202,
        body={"status": "processing", "operationId": "op_1"},
        headers=httpx.Headers(),
        key="k",
        replayed=False,
        attempts=1,
    )

    with client_for(script) as client:
        operation = client.wait(accepted)

    assert operation == succeeded
    assert time.sleeps == [1.0, 2.0]
    assert {sent.request.url.path for sent in script.sent} == {"/v1/operations/op_1"}


@pytest.mark.parametrize(
    "operation", ["op_1", {"operationId": "op_1", "status": "processing"}, {"id": "op_1"}]
)
def test_wait_takes_an_id_an_answer_or_an_operation(operation: str | dict[str, str]) -> None:
    script = Script(answer(200, {"id": "op_1", "status": "failed"}), time=FakeTime())

    with client_for(script) as client:
        assert client.wait(operation)["status"] == "failed"


def test_wait_gives_up_when_no_poll_fits_before_the_timeout() -> None:
    time = FakeTime()
    script = Script(
        answer(200, {"id": "op_1", "status": "processing"}, headers={"Retry-After": "1"}),
        time=time,
    )

    with client_for(script) as client, pytest.raises(OperationTimeout) as raised:
        client.wait("op_1", timeout=3.5)

    assert isinstance(raised.value, TimeoutError)
    assert raised.value.operation["status"] == "processing"
    assert all(sent.at < 3.5 for sent in script.sent)
    assert len(script.sent) == 4


def test_wait_follows_a_growing_retry_after_and_polls_last_at_the_end_of_its_budget() -> None:
    # The service asks for longer waits as an operation ages, up to 30 s;
    # one reaching past the timeout is cut so that a last poll fits in it.
    time = FakeTime()
    processing = {"id": "op_1", "status": "processing"}
    script = Script(
        answer(200, processing, headers={"Retry-After": "5"}),
        answer(200, processing, headers={"Retry-After": "12"}),
        answer(200, processing, headers={"Retry-After": "30"}),
        answer(200, {"id": "op_1", "status": "succeeded"}),
        time=time,
    )

    with client_for(script) as client:
        operation = client.wait("op_1", timeout=40.0)

    assert operation["status"] == "succeeded"
    assert time.sleeps == [5.0, 12.0, 22.0]
    assert [sent.at for sent in script.sent] == [0.0, 5.0, 17.0, 39.0]


def test_list_orders_follows_the_next_links() -> None:
    script = Script(
        answer(
            200,
            {
                "results": [{"id": "ord_3"}, {"id": "ord_2"}],
                "next": "/v1/orders?cursor=c2&pageSize=2",
            },
        ),
        answer(200, {"results": [{"id": "ord_1"}], "next": None}),
        time=FakeTime(),
    )

    with client_for(script) as client:
        ids = [order["id"] for order in client.list_orders(page_size=2)]

    assert ids == ["ord_3", "ord_2", "ord_1"]
    assert [str(sent.request.url) for sent in script.sent] == [
        f"{BASE_URL}/v1/orders?pageSize=2",
        f"{BASE_URL}/v1/orders?cursor=c2&pageSize=2",
    ]


def test_lookup_key_encodes_the_key_and_answers_none_when_unknown() -> None:
    script = Script(
        problem(404, "NotFound"),
        answer(200, {"key": "a/b c", "status": 201}),
        time=FakeTime(),
    )

    with client_for(script) as client:
        unknown = client.lookup_key("a/b c")
        known = client.lookup_key("a/b c")

    assert unknown is None
    assert known == {"key": "a/b c", "status": 201}
    assert script.sent[0].request.url.raw_path == b"/v1/idempotency-keys/a%2Fb%20c"


# The asyncio twin runs the same loop.


def test_the_async_client_retries_with_the_same_key_and_waits() -> None:
    time = FakeTime()
    script = Script(
        fail(httpx.ConnectError),
        problem(503, "ServiceUnavailable", headers={"Retry-After": "1"}),
        answer(202, {"status": "processing", "operationId": "op_1"}),
        answer(200, {"id": "op_1", "status": "processing"}, headers={"Retry-After": "1"}),
        answer(200, {"id": "op_1", "status": "succeeded"}),
        time=time,
    )

    async def pay_and_wait() -> tuple[CommandResult, dict[str, object]]:
        async with AsyncOrderServiceClient(
            BASE_URL,
            TOKEN,
            transport=httpx.MockTransport(script),
            sleep=time.async_sleep,
            clock=time.clock,
        ) as client:
            accepted = await client.pay(
                order_id="ord_1", amount=3980, currency="RUB", payment_method="pm_card_ok"
            )
            return accepted, await client.wait(accepted)

    accepted, operation = asyncio.run(pay_and_wait())

    assert accepted.attempts == 3
    assert script.keys[:3] == [accepted.key] * 3
    assert script.keys[3:] == [None, None]
    assert operation["status"] == "succeeded"
    assert time.sleeps[1] >= 1.0
    assert time.sleeps[2] == 1.0


def test_the_async_client_keeps_an_intents_key_across_runs(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    time = FakeTime()
    script = Script(
        answer(201, CREATED),
        answer(201, CREATED, headers={"Idempotent-Replayed": "true"}),
        time=time,
    )

    async def run() -> CommandResult:
        async with AsyncOrderServiceClient(
            BASE_URL,
            TOKEN,
            key_store=SQLiteKeyStore(path),
            transport=httpx.MockTransport(script),
            sleep=time.async_sleep,
            clock=time.clock,
        ) as client:
            return await client.create_order(
                customer_id="c-1", currency="RUB", items=ORDER_LINES, intent="order:cart-81"
            )

    first = asyncio.run(run())
    second = asyncio.run(run())

    assert script.keys == [first.key, first.key]
    assert second.replayed


def test_the_async_client_stops_at_the_published_retention_too() -> None:
    time = FakeTime()
    script = Script(
        problem(503, "ServiceUnavailable", headers={"Retry-After": "1"}),
        time=time,
        policy=published_policy(retention=30),
    )

    async def create() -> CommandResult:
        async with AsyncOrderServiceClient(
            BASE_URL,
            TOKEN,
            transport=httpx.MockTransport(script),
            sleep=time.async_sleep,
            clock=time.clock,
        ) as client:
            return await client.create_order(
                customer_id="c-1", currency="RUB", items=ORDER_LINES, key="k-async"
            )

    with pytest.raises(KeyLifetimeOver) as raised:
        asyncio.run(create())

    assert len(script.policy_reads) == 1
    assert all(sent.at < 30.0 for sent in script.sent)
    assert raised.value.attempts == len(script.sent)
