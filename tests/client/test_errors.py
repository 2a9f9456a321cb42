"""Error mapping: a canned problem+json answer becomes the exception for its code.

Each of the API's codes (docs/SPECIFICATION.md §2 rule 8) maps to its class;
a code this client does not know falls back by status; an answer that is not
problem+json still makes an ApiError that says so. The last tests send canned answers through the
client over an ``httpx.MockTransport``: what reaches the caller is the
typed exception, with the command's key.
"""

import json
from typing import Any

import httpx
import pytest
from order_service_client import (
    ApiError,
    AuthenticationFailed,
    BadRequest,
    ClientError,
    Conflict,
    IdempotencyKeyConflict,
    IdempotencyKeyInProgress,
    NotFound,
    OrderAlreadyExists,
    OrderServiceError,
    PreconditionFailed,
    ServerError,
    Throttled,
    Unprocessable,
    ValidationFailed,
    error_from_response,
)

from tests.client.fakes import ORDER_LINES, FakeTime, Script, client_for, problem

CONTRACT_CODES: list[tuple[int, str, type[ApiError]]] = [
    (400, "ValidationError", ValidationFailed),
    (400, "MalformedJson", BadRequest),
    (400, "IdempotencyKeyRequired", BadRequest),
    (400, "IdempotencyKeyInvalid", BadRequest),
    (401, "NotAuthenticated", AuthenticationFailed),
    (401, "AuthenticationFailed", AuthenticationFailed),
    (404, "NotFound", NotFound),
    (405, "MethodNotAllowed", ClientError),
    (406, "NotAcceptable", ClientError),
    (415, "UnsupportedMediaType", ClientError),
    (409, "IdempotencyKeyConflict", IdempotencyKeyConflict),
    (409, "IdempotencyKeyInProgress", IdempotencyKeyInProgress),
    (409, "OrderStateConflict", Conflict),
    (409, "OrderAlreadyPaid", Conflict),
    (409, "PaymentInProgress", Conflict),
    (409, "OrderAlreadyExists", OrderAlreadyExists),
    (413, "PayloadTooLarge", ClientError),
    (412, "PreconditionFailed", PreconditionFailed),
    (422, "UnknownSku", Unprocessable),
    (422, "CurrencyMismatch", Unprocessable),
    (422, "AmountMismatch", Unprocessable),
    (422, "OrderNotFound", Unprocessable),
    (429, "Throttled", Throttled),
    (500, "InternalError", ServerError),
    (503, "ServiceUnavailable", ServerError),
]


def problem_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.Response(
        status,
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/problem+json", **(headers or {})},
    )


def service_problem(status: int, code: str, **members: Any) -> dict[str, Any]:
    return {
        "type": f"urn:order-service:problem:{code}",
        "title": code,
        "status": status,
        "error": code,
        "message": f"{code}, for people.",
        "traceId": "9f1c",
        **members,
    }


@pytest.mark.parametrize(("status", "code", "expected"), CONTRACT_CODES)
def test_each_contract_code_has_its_class(status: int, code: str, expected: type[ApiError]) -> None:
    body = service_problem(status, code, details={"why": ["because"]})

    error = error_from_response(problem_response(status, body), key="k-1")

    assert type(error) is expected
    assert isinstance(error, ApiError)
    assert isinstance(error, OrderServiceError)
    assert (error.status, error.error, error.message) == (status, code, f"{code}, for people.")
    assert error.trace_id == "9f1c"
    assert error.details == {"why": ["because"]}
    assert error.body == body
    assert error.key == "k-1"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, BadRequest),
        (401, AuthenticationFailed),
        (404, NotFound),
        (409, Conflict),
        (412, PreconditionFailed),
        (418, ClientError),
        (422, Unprocessable),
        (429, Throttled),
        (500, ServerError),
        (507, ServerError),
    ],
)
def test_an_unknown_code_falls_back_by_status(status: int, expected: type[ApiError]) -> None:
    response = problem_response(status, service_problem(status, "SomethingNewer"))

    error = error_from_response(response)

    assert type(error) is expected
    assert error.error == "SomethingNewer"


def test_a_key_conflict_names_what_differs() -> None:
    body = service_problem(
        409,
        "IdempotencyKeyConflict",
        details={"mismatch": ["/items/0/qty", "/currency"]},
        idempotencyKey="k-1",
    )

    error = error_from_response(problem_response(409, body), key="k-1")

    assert isinstance(error, IdempotencyKeyConflict)
    assert error.mismatch == ["/items/0/qty", "/currency"]
    assert error.body["idempotencyKey"] == "k-1"


def test_a_key_conflict_without_details_has_no_mismatch() -> None:
    error = error_from_response(
        problem_response(409, service_problem(409, "IdempotencyKeyConflict"))
    )

    assert isinstance(error, IdempotencyKeyConflict)
    assert error.mismatch == []


def test_a_taken_order_id_names_what_differs_and_is_no_key_conflict() -> None:
    body = service_problem(409, "OrderAlreadyExists", details={"mismatch": ["/items/0/qty"]})

    error = error_from_response(problem_response(409, body), key="k-1")

    assert isinstance(error, OrderAlreadyExists)
    assert isinstance(error, Conflict)
    # Another failure: `except IdempotencyKeyConflict` (a caller's bug) does not catch it.
    assert not isinstance(error, IdempotencyKeyConflict)
    assert error.mismatch == ["/items/0/qty"]


def test_a_taken_order_id_without_details_has_no_mismatch() -> None:
    error = error_from_response(problem_response(409, service_problem(409, "OrderAlreadyExists")))

    assert isinstance(error, OrderAlreadyExists)
    assert error.mismatch == []


def test_a_failed_precondition_is_its_own_client_error() -> None:
    error = error_from_response(
        problem_response(412, service_problem(412, "PreconditionFailed")), key="k-1"
    )

    assert type(error) is PreconditionFailed
    assert isinstance(error, ClientError)
    assert not isinstance(error, Conflict)
    assert error.key == "k-1"


def test_the_trace_id_falls_back_to_the_request_id_header() -> None:
    body = service_problem(404, "NotFound")
    del body["traceId"]

    error = error_from_response(problem_response(404, body, {"X-Request-ID": "req-42"}))

    assert error.trace_id == "req-42"


def test_replay_and_retry_after_are_read_from_the_headers() -> None:
    response = problem_response(
        500,
        service_problem(500, "InternalError"),
        {"Idempotent-Replayed": "true", "Retry-After": "3"},
    )

    error = error_from_response(response)

    assert error.replayed
    assert error.retry_after == 3.0


def test_the_message_names_status_code_and_trace() -> None:
    error = error_from_response(problem_response(422, service_problem(422, "UnknownSku")))

    assert str(error) == "422 UnknownSku: UnknownSku, for people. (traceId 9f1c)"


@pytest.mark.parametrize(
    ("status", "content_type", "content", "expected"),
    [
        (502, "text/html", b"<html><h1>502 Bad Gateway</h1></html>", ServerError),
        (504, None, b"", ServerError),
        (413, "text/html", b"<html>Request Entity Too Large</html>", ClientError),
        (400, "application/problem+json", b"{not json", BadRequest),
        (404, "application/json", b"[1, 2]", NotFound),
        (302, "text/plain", b"moved", ApiError),
    ],
)
def test_an_answer_that_is_not_a_problem_is_still_an_api_error(
    status: int, content_type: str | None, content: bytes, expected: type[ApiError]
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}

    error = error_from_response(httpx.Response(status, content=content, headers=headers))

    assert type(error) is expected
    assert error.status == status
    assert error.error is None
    assert error.body == {}
    assert "not a problem+json body" in error.message
    assert f"Content-Type: {content_type or 'none'}" in error.message
    assert content.decode()[:20] in error.message


def test_a_long_foreign_body_is_quoted_in_part() -> None:
    error = error_from_response(
        httpx.Response(502, content=b"x" * 10_000, headers={"Content-Type": "text/plain"})
    )

    assert len(error.message) < 600


# Through the client: canned answers over a MockTransport.


def test_a_read_raises_the_typed_error() -> None:
    script = Script(problem(404, "NotFound"), time=FakeTime())

    with client_for(script) as client, pytest.raises(NotFound) as raised:
        client.get_order("ord_missing")

    assert raised.value.trace_id == "trace-1"
    assert raised.value.key is None
    assert len(script.sent) == 1


def test_a_command_raises_the_typed_error_with_its_key() -> None:
    script = Script(
        problem(409, "IdempotencyKeyConflict", details={"mismatch": ["/items/0/qty"]}),
        time=FakeTime(),
    )

    with client_for(script) as client, pytest.raises(IdempotencyKeyConflict) as raised:
        client.create_order(customer_id="c-1", currency="RUB", items=ORDER_LINES, key="k-7")

    assert raised.value.mismatch == ["/items/0/qty"]
    assert raised.value.key == "k-7"
    assert len(script.sent) == 1


def test_a_validation_error_carries_its_fields() -> None:
    details = {"paymentMethod": ["Not a payment method of this provider: pm_card_ok."]}
    script = Script(problem(400, "ValidationError", details=details), time=FakeTime())

    with client_for(script) as client, pytest.raises(ValidationFailed) as raised:
        client.pay(order_id="ord_1", amount=3980, currency="RUB", payment_method="pm_cash")

    assert raised.value.details == details
