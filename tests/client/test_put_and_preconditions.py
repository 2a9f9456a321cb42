"""Orders under ids the caller chooses, commands conditional on a version, reads with their ETag.

``put_order`` is ``create_order`` under an id: the same body, key and
retry loop, ``201`` or ``200`` as the service says. ``if_match`` is part of
the call like the key: every attempt carries the same ``If-Match``. A
``412 PreconditionFailed`` and a ``409 OrderAlreadyExists`` are final
answers, raised at once. As in test_client_loop, the answers are scripted
over an ``httpx.MockTransport`` on fake time; nothing here says how the
real service behaves.
"""

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest
from order_service_client import (
    AsyncOrderServiceClient,
    CommandResult,
    MemoryKeyStore,
    NotFound,
    OrderAlreadyExists,
    OrderServiceClient,
    PreconditionFailed,
    RetriesExhausted,
    RetryEvent,
    RetryPolicy,
    ValidationFailed,
    Versioned,
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
)

ETAG = '"5d41402abc4b2a76b9719d911017c592"'
CANCELLED = {"status": "succeeded", "orderId": "ord_1", "order": {**ORDER, "status": "cancelled"}}

# A command that takes if_match, as each test calls it.
Command = Callable[..., CommandResult]


def put(
    client: OrderServiceClient,
    *,
    key: str | None = None,
    intent: str | None = None,
    if_match: str | None = None,
) -> CommandResult:
    return client.put_order(
        "ord_1",
        customer_id="c-1",
        currency="RUB",
        items=ORDER_LINES,
        key=key,
        intent=intent,
        if_match=if_match,
    )


def cancel(
    client: OrderServiceClient,
    *,
    key: str | None = None,
    intent: str | None = None,
    if_match: str | None = None,
) -> CommandResult:
    return client.cancel(
        "ord_1", reason="changed my mind", key=key, intent=intent, if_match=if_match
    )


# (the call, its method and path, the success it gets)
COMMANDS = [
    pytest.param(put, "PUT", "/v1/orders/ord_1", answer(201, CREATED), id="put_order"),
    pytest.param(cancel, "POST", "/v1/orders/ord_1/cancel", answer(200, CANCELLED), id="cancel"),
]


# put_order: create_order under an id.


def test_put_order_sends_create_orders_body_to_the_ids_path() -> None:
    script = Script(answer(201, CREATED, headers={"Location": "/v1/orders/ord_1"}), time=FakeTime())

    with client_for(script) as client:
        created = client.put_order(
            "ord_1", customer_id="c-1", currency="RUB", items=ORDER_LINES, key="k-put"
        )
        client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, key="k-post")

    sent_put, sent_post = (sent.request for sent in script.sent)
    assert (sent_put.method, sent_put.url.path) == ("PUT", "/v1/orders/ord_1")
    assert sent_put.headers["Idempotency-Key"] == "k-put"
    assert sent_put.headers["Content-Type"] == "application/json"
    assert sent_put.headers["Authorization"] == f"Bearer {TOKEN}"
    # The same bytes as the POST: one body, two ways to place it.
    assert sent_put.content == sent_post.content
    assert json.loads(sent_put.content) == {
        "customerId": "c-1",
        "items": ORDER_LINES,
        "currency": "RUB",
    }
    assert "If-Match" not in sent_put.headers
    assert (created.status, created.body, created.key) == (201, CREATED, "k-put")
    assert created.headers["Location"] == "/v1/orders/ord_1"


def test_put_order_of_an_id_holding_an_equivalent_order_answers_200() -> None:
    script = Script(answer(200, CREATED), time=FakeTime())

    with client_for(script) as client:
        result = put(client)

    # The status tells placed (201) from found (200); the body's shape is the same.
    assert result.status == 200
    assert result.body["order"] == ORDER
    assert not result.replayed
    assert len(script.sent) == 1


def test_put_order_quotes_the_id_as_one_path_segment() -> None:
    script = Script(answer(201, CREATED), time=FakeTime())

    with client_for(script) as client:
        client.put_order("ord/../x?y#z", customer_id="c-1", currency="RUB", items=ORDER_LINES)

    assert script.sent[0].request.url.raw_path == b"/v1/orders/ord%2F..%2Fx%3Fy%23z"


def test_put_order_leaves_the_ids_syntax_to_the_service() -> None:
    details = {"orderId": ["ord_ and 1 to 64 of A-Z a-z 0-9 _ -."]}
    script = Script(problem(400, "ValidationError", details=details), time=FakeTime())

    with client_for(script) as client, pytest.raises(ValidationFailed) as raised:
        client.put_order("not an id", customer_id="c-1", currency="RUB", items=ORDER_LINES)

    assert script.sent[0].request.url.raw_path == b"/v1/orders/not%20an%20id"
    assert raised.value.details == details
    assert len(script.sent) == 1


def test_put_order_retries_with_the_same_key_and_body_as_create_order_does() -> None:
    time = FakeTime()
    events: list[RetryEvent] = []
    script = Script(
        fail(httpx.ConnectError),
        problem(503, "ServiceUnavailable", headers={"Retry-After": "1"}),
        fail(httpx.ReadTimeout),
        problem(409, "IdempotencyKeyInProgress"),
        # The first attempt placed it and lost its answer: the key's answer is replayed.
        answer(201, CREATED, headers={"Idempotent-Replayed": "true"}),
        time=time,
    )

    with client_for(script, on_retry=events.append) as client:
        result = put(client)

    assert result.attempts == 5
    assert result.replayed
    assert script.keys == [result.key] * 5
    assert len({sent.request.content for sent in script.sent}) == 1
    assert {(sent.request.method, sent.request.url.path) for sent in script.sent} == {
        ("PUT", "/v1/orders/ord_1")
    }
    assert [event.reason for event in events] == [
        "ConnectError",
        "503",
        "ReadTimeout",
        "IdempotencyKeyInProgress",
    ]
    assert {(event.method, event.path) for event in events} == {("PUT", "/v1/orders/ord_1")}
    assert time.sleeps[1] >= 1.0


def test_put_order_takes_a_key_or_an_intent_as_create_order_does() -> None:
    store = MemoryKeyStore()
    key = store.key_for("order:cart-81")
    script = Script(answer(201, CREATED), time=FakeTime())

    with client_for(script, key_store=store) as client:
        with pytest.raises(ValueError, match="not both"):
            put(client, key="k", intent="order:cart-81")
        with pytest.raises(ValueError, match="Idempotency-Key"):
            put(client, key="has space")
        assert script.sent == []
        result = put(client, intent="order:cart-81")

    assert script.keys == [key] == [result.key]
    # Kept after the answer: a rerun of the intent replays it.
    assert store.key_for("order:cart-81") == key


# If-Match: part of the call, on every attempt.


@pytest.mark.parametrize(("command", "method", "path", "success"), COMMANDS)
def test_if_match_is_sent_on_every_attempt_with_the_same_key(
    command: Command, method: str, path: str, success: Outcome
) -> None:
    script = Script(
        fail(httpx.ConnectError),
        problem(503, "ServiceUnavailable"),
        fail(httpx.RemoteProtocolError),
        problem(429, "Throttled", headers={"Retry-After": "1"}),
        success,
        time=FakeTime(),
    )

    with client_for(script) as client:
        result = command(client, if_match=ETAG)

    assert result.attempts == 5
    assert [sent.request.headers.get("If-Match") for sent in script.sent] == [ETAG] * 5
    assert script.keys == [result.key] * 5
    assert len({sent.request.content for sent in script.sent}) == 1
    assert {(sent.request.method, sent.request.url.path) for sent in script.sent} == {
        (method, path)
    }


@pytest.mark.parametrize(("command", "method", "path", "success"), COMMANDS)
def test_if_match_is_sent_as_it_is_given(
    command: Command, method: str, path: str, success: Outcome
) -> None:
    script = Script(success, time=FakeTime())

    with client_for(script) as client:
        command(client, if_match="*")
        command(client, if_match='W/"weak", "strong"')
        command(client)

    assert [sent.request.headers.get("If-Match") for sent in script.sent] == [
        "*",
        'W/"weak", "strong"',
        None,
    ]


def test_the_etag_read_is_the_if_match_sent() -> None:
    script = Script(
        answer(200, ORDER, headers={"ETag": ETAG}),
        answer(200, CANCELLED),
        time=FakeTime(),
    )

    with client_for(script) as client:
        current = client.get_order_versioned("ord_1")
        assert current.etag is not None
        client.cancel("ord_1", if_match=current.etag)

    read, cancelled = (sent.request for sent in script.sent)
    assert "If-Match" not in read.headers
    assert cancelled.headers["If-Match"] == ETAG


# 412 and 409 OrderAlreadyExists: final, raised at once, even after retries.


@pytest.mark.parametrize(("command", "method", "path", "success"), COMMANDS)
def test_a_failed_precondition_is_raised_at_once(
    command: Command, method: str, path: str, success: Outcome
) -> None:
    time = FakeTime()
    events: list[RetryEvent] = []
    script = Script(
        fail(httpx.ConnectError),
        problem(412, "PreconditionFailed"),
        success,
        time=time,
    )

    client = client_for(script, on_retry=events.append)

    with client, pytest.raises(PreconditionFailed) as raised:
        command(client, if_match=ETAG, key="k-412")

    # One retry for the lost answer, none for the refusal.
    assert len(script.sent) == 2
    assert len(time.sleeps) == 1
    assert [event.reason for event in events] == ["ConnectError"]
    assert raised.value.status == 412
    assert raised.value.key == "k-412"
    assert [sent.request.headers["If-Match"] for sent in script.sent] == [ETAG] * 2


def test_a_taken_order_id_is_raised_at_once_with_what_differs() -> None:
    time = FakeTime()
    script = Script(
        problem(409, "OrderAlreadyExists", details={"mismatch": ["/items/0/qty", "/currency"]}),
        answer(201, CREATED),
        time=time,
    )

    with client_for(script) as client, pytest.raises(OrderAlreadyExists) as raised:
        put(client, key="k-409")

    assert len(script.sent) == 1
    assert time.sleeps == []
    assert raised.value.mismatch == ["/items/0/qty", "/currency"]
    assert raised.value.key == "k-409"


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (problem(412, "PreconditionFailed"), PreconditionFailed),
        (problem(409, "OrderAlreadyExists"), OrderAlreadyExists),
    ],
    ids=["412", "409-order-exists"],
)
def test_a_retry_policy_that_allows_many_attempts_still_makes_one(
    outcome: Outcome, error: type[Exception]
) -> None:
    script = Script(outcome, time=FakeTime())

    client = client_for(script, retry=RetryPolicy(max_attempts=100, deadline=600.0))

    with client, pytest.raises(error):
        put(client, if_match=ETAG)

    # Not RetriesExhausted: the answer is final, the outcome known.
    assert len(script.sent) == 1


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (problem(412, "PreconditionFailed"), PreconditionFailed),
        (problem(409, "OrderAlreadyExists"), OrderAlreadyExists),
    ],
    ids=["412", "409-order-exists"],
)
def test_a_stored_refusal_of_a_precondition_or_id_keeps_the_intents_key(
    outcome: Outcome, error: type[Exception]
) -> None:
    # Both are stored under the key: a rerun of the intent replays the
    # refusal, and the caller's next decision (a fresh read, another id)
    # is a new intent, or the old one forgotten on purpose.
    store = MemoryKeyStore()
    key = store.key_for("order:cart-81")
    script = Script(outcome, time=FakeTime())

    with client_for(script, key_store=store) as client, pytest.raises(error):
        put(client, intent="order:cart-81", if_match=ETAG)

    assert script.keys == [key]
    assert store.key_for("order:cart-81") == key
    store.forget("order:cart-81")
    assert store.key_for("order:cart-81") != key


def test_a_precondition_that_never_gets_an_answer_keeps_its_key_and_tag() -> None:
    script = Script(fail(httpx.ReadTimeout), time=FakeTime())

    client = client_for(script, retry=RetryPolicy(max_attempts=3))

    with client, pytest.raises(RetriesExhausted) as raised:
        cancel(client, if_match=ETAG, key="k-lost")

    assert raised.value.key == "k-lost"
    assert [sent.request.headers["If-Match"] for sent in script.sent] == [ETAG] * 3


# Reads with their ETag.


@pytest.mark.parametrize(
    ("read", "path"),
    [
        ("get_order_versioned", "/v1/orders/ord_1"),
        ("get_payment_versioned", "/v1/payments/ord_1"),
        ("get_operation_versioned", "/v1/operations/ord_1"),
    ],
)
def test_a_versioned_read_answers_the_body_and_its_etag(read: str, path: str) -> None:
    script = Script(
        fail(httpx.ReadError),
        answer(200, {"id": "x"}, headers={"ETag": ETAG}),
        time=FakeTime(),
    )

    with client_for(script) as client:
        versioned = getattr(client, read)("ord_1")

    assert isinstance(versioned, Versioned)
    assert versioned.body == {"id": "x"}
    assert versioned.etag == ETAG
    assert versioned.headers["ETag"] == ETAG
    # Reads are retried, and carry neither a key nor a precondition.
    assert script.keys == [None, None]
    assert [sent.request.headers.get("If-Match") for sent in script.sent] == [None, None]
    assert {(sent.request.method, sent.request.url.path) for sent in script.sent} == {("GET", path)}


@pytest.mark.parametrize("read", ["get_order", "get_payment", "get_operation"])
def test_the_plain_reads_still_answer_the_body_alone(read: str) -> None:
    script = Script(answer(200, ORDER, headers={"ETag": ETAG}), time=FakeTime())

    with client_for(script) as client:
        assert getattr(client, read)("ord_1") == ORDER


def test_a_read_without_an_etag_has_none() -> None:
    script = Script(answer(200, ORDER), time=FakeTime())

    with client_for(script) as client:
        versioned = client.get_order_versioned("ord_1")

    assert versioned.etag is None
    assert versioned.body == ORDER


def test_a_versioned_read_raises_the_typed_error() -> None:
    script = Script(problem(404, "NotFound"), time=FakeTime())

    with client_for(script) as client, pytest.raises(NotFound):
        client.get_order_versioned("ord_missing")

    assert len(script.sent) == 1


# The asyncio twin.


def async_client_for(script: Script) -> AsyncOrderServiceClient:
    return AsyncOrderServiceClient(
        BASE_URL,
        TOKEN,
        transport=httpx.MockTransport(script),
        sleep=script.time.async_sleep,
        clock=script.time.clock,
    )


def test_the_async_client_puts_reads_versions_and_sends_if_match() -> None:
    script = Script(
        fail(httpx.ConnectError),
        problem(503, "ServiceUnavailable"),
        answer(200, CREATED),
        answer(200, ORDER, headers={"ETag": ETAG}),
        fail(httpx.ReadTimeout),
        answer(200, CANCELLED),
        time=FakeTime(),
    )

    async def put_read_cancel() -> tuple[CommandResult, Versioned, CommandResult]:
        async with async_client_for(script) as client:
            placed = await client.put_order(
                "ord_1", customer_id="c-1", currency="RUB", items=ORDER_LINES, if_match="*"
            )
            current = await client.get_order_versioned("ord_1")
            assert current.etag is not None
            cancelled = await client.cancel("ord_1", if_match=current.etag, key="k-cancel")
            return placed, current, cancelled

    placed, current, cancelled = asyncio.run(put_read_cancel())

    assert (placed.status, placed.attempts) == (200, 3)
    assert (current.body, current.etag) == (ORDER, ETAG)
    assert (cancelled.status, cancelled.attempts, cancelled.key) == (200, 2, "k-cancel")
    assert [(sent.request.method, sent.request.url.path) for sent in script.sent] == [
        ("PUT", "/v1/orders/ord_1"),
        ("PUT", "/v1/orders/ord_1"),
        ("PUT", "/v1/orders/ord_1"),
        ("GET", "/v1/orders/ord_1"),
        ("POST", "/v1/orders/ord_1/cancel"),
        ("POST", "/v1/orders/ord_1/cancel"),
    ]
    assert [sent.request.headers.get("If-Match") for sent in script.sent] == [
        "*",
        "*",
        "*",
        None,
        ETAG,
        ETAG,
    ]
    assert script.keys == [placed.key] * 3 + [None] + ["k-cancel"] * 2


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (problem(412, "PreconditionFailed"), PreconditionFailed),
        (
            problem(409, "OrderAlreadyExists", details={"mismatch": ["/currency"]}),
            OrderAlreadyExists,
        ),
    ],
    ids=["412", "409-order-exists"],
)
def test_the_async_client_raises_refusals_at_once(outcome: Outcome, error: type[Exception]) -> None:
    time = FakeTime()
    script = Script(outcome, answer(201, CREATED), time=time)

    async def put_it() -> CommandResult:
        async with async_client_for(script) as client:
            return await client.put_order(
                "ord_1", customer_id="c-1", currency="RUB", items=ORDER_LINES, if_match=ETAG
            )

    with pytest.raises(error):
        asyncio.run(put_it())

    assert len(script.sent) == 1
    assert time.sleeps == []


def test_the_async_plain_reads_still_answer_the_body_alone() -> None:
    script = Script(answer(200, ORDER, headers={"ETag": ETAG}), time=FakeTime())

    async def read_all() -> list[dict[str, object]]:
        async with async_client_for(script) as client:
            return [
                await client.get_order("ord_1"),
                await client.get_payment("pay_1"),
                await client.get_operation("op_1"),
                (await client.get_payment_versioned("pay_1")).body,
                (await client.get_operation_versioned("op_1")).body,
            ]

    assert asyncio.run(read_all()) == [ORDER] * 5
    assert [sent.request.url.path for sent in script.sent] == [
        "/v1/orders/ord_1",
        "/v1/payments/pay_1",
        "/v1/operations/op_1",
        "/v1/payments/pay_1",
        "/v1/operations/op_1",
    ]
