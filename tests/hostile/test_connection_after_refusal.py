"""No refusal leaves a kept-alive connection that fails the client's next request.

Each refusal is sent on a new HTTP/1.1 connection, and then either its
answer said ``Connection: close`` and the server closed, or it did not and
the same connection answers a second request (contract §2). A body refused
unread (over 1 MiB) or cut short leaves no next request to read on the
connection, so those answers close it and say so; the app's other
refusals read the whole body and keep the connection. Both directly on
gunicorn (the project's config and worker) and behind nginx.

A header sent twice is joined with a comma by gunicorn (and nginx passes
both lines on): ``Idempotency-Key: K`` twice reads ``K,K``, which is no
key, so such a command is refused and creates nothing.
"""

import json
from collections.abc import Iterator

import httpx
import pytest

from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support.connections import answer_then_reuse
from tests.support.http import ORDER, Api
from tests.support.live import LiveService

pytestmark = pytest.mark.django_db(transaction=True)

MIB = 1024 * 1024
TOKEN = "an-unknown-token"


@pytest.fixture(params=["gunicorn", "nginx"])
def service(request: pytest.FixtureRequest, stack: tuple[LiveService, LiveService]) -> LiveService:
    edge, app = stack
    return app if request.param == "gunicorn" else edge


def head(request_line: str, *headers: str, token: str = TOKEN) -> bytes:
    lines = [request_line, "Host: 127.0.0.1", f"Authorization: Bearer {token}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        piece = body[start : start + size]
        yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    yield b"0\r\n\r\n"


def command(request_line: str, body: bytes, *headers: str, token: str = TOKEN) -> bytes:
    return head(
        request_line,
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *headers,
        token=token,
    )


TWO_MIB = b"x" * (2 * MIB)
ORDER_BODY = json.dumps(ORDER).encode()
CHUNKED = "Transfer-Encoding: chunked"


# --- refusals after which the server closes ------------------------------------


def test_a_body_declared_over_1_mib_is_413_and_closes(service: LiveService) -> None:
    after = answer_then_reuse(service, command("POST /v1/orders HTTP/1.1", TWO_MIB), [TWO_MIB])

    assert after.answer is not None
    assert after.answer.status == 413
    assert after.announced_close
    after.assert_truthful()


def test_a_chunked_body_over_1_mib_is_413_and_closes(service: LiveService) -> None:
    after = answer_then_reuse(
        service,
        head("POST /v1/orders HTTP/1.1", "Content-Type: application/json", CHUNKED),
        chunked(TWO_MIB),
    )

    assert after.answer is not None
    assert after.answer.status == 413
    assert after.announced_close
    after.assert_truthful()


@pytest.mark.parametrize("over", [1, 100], ids=["1-byte-over", "100-bytes-over"])
def test_a_chunked_body_just_over_1_mib_is_413_and_tells_the_truth(
    service: LiveService, over: int
) -> None:
    # What remains after the 1 MiB read is small enough to drain, and
    # gunicorn would: but how much remains is not known when the answer is
    # written, so the app closes (either is the contract's).
    body = b"x" * (MIB + over)

    after = answer_then_reuse(
        service,
        head("POST /v1/orders HTTP/1.1", "Content-Type: application/json", CHUNKED),
        chunked(body),
    )

    assert after.answer is not None
    assert after.answer.status == 413
    after.assert_truthful()


def test_a_body_cut_short_of_its_content_length_closes(service: LiveService) -> None:
    body = b'{"reason": "half"}'
    cut_short = head(
        "POST /v1/orders/ord_x/cancel HTTP/1.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body) + 20}",
        "Idempotency-Key: cut-short",
    )

    after = answer_then_reuse(service, cut_short, [body], half_close=True)

    # gunicorn answers 400 MalformedJson; nginx, which forwards only whole
    # requests, closes without an answer.
    if after.answer is not None:
        assert after.answer.status == 400
        assert json.loads(after.answer.body)["error"] == "MalformedJson"
        assert after.announced_close
    after.assert_truthful()


def test_a_chunked_body_cut_short_closes(service: LiveService) -> None:
    after = answer_then_reuse(
        service,
        head("POST /v1/orders HTTP/1.1", "Content-Type: application/json", CHUNKED),
        [b"10\r\nabc"],
        half_close=True,
    )

    # Neither answers: the client is gone before its body ended.
    assert after.answer is None
    after.assert_truthful()


def test_an_unreadable_chunked_body_is_400_and_closes(service: LiveService) -> None:
    after = answer_then_reuse(
        service,
        head("POST /v1/orders HTTP/1.1", "Content-Type: application/json", CHUNKED),
        [b"zz\r\nabc\r\n0\r\n\r\n"],
    )

    assert after.answer is not None
    assert after.answer.status == 400
    assert json.loads(after.answer.body)["error"] == "BadRequest"
    assert after.announced_close
    after.assert_truthful()


# --- the app's refusals, after which the connection serves ---------------------

# Read whole by the app before it refuses, like every body within the limit.
JUNK = b"{" * 100_000


def _app_refusal(name: str, token: str) -> tuple[bytes, bytes]:
    """The request (head, body) of each of the app's own refusals."""
    key = f"Idempotency-Key: contrast-{name}"
    text = ("Content-Type: text/plain", f"Content-Length: {len(JUNK)}", key)
    return {
        "400": (command("POST /v1/orders HTTP/1.1", JUNK, key, token=token), JUNK),
        "401": (command("POST /v1/orders HTTP/1.1", JUNK, key), JUNK),
        "404": (head("GET /v1/nothing-here HTTP/1.1", token=token), b""),
        "405": (head("DELETE /v1/orders HTTP/1.1", token=token), b""),
        "415": (head("POST /v1/orders HTTP/1.1", *text, token=token), JUNK),
    }[name]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "MalformedJson"),
        (401, "AuthenticationFailed"),
        (404, "NotFound"),
        (405, "MethodNotAllowed"),
        (415, "UnsupportedMediaType"),
    ],
)
def test_the_apps_refusals_keep_a_usable_connection(
    service: LiveService, api: Api, status: int, code: str
) -> None:
    request_head, body = _app_refusal(str(status), api.token)

    after = answer_then_reuse(service, request_head, [body])

    assert after.answer is not None
    assert after.answer.status == status
    assert json.loads(after.answer.body)["error"] == code
    assert not after.announced_close
    after.assert_truthful()
    assert IdempotencyKey.objects.count() == 0


# --- a pooled client -------------------------------------------------------------


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_pooled_client_goes_on_after_a_413(service: LiveService, framing: str) -> None:
    def pieces() -> Iterator[bytes]:
        for _ in range(32):
            yield b"x" * (64 * 1024)

    with httpx.Client(base_url=service.base_url, timeout=15) as client:
        refused = client.post(
            "/v1/orders",
            content=TWO_MIB if framing == "content-length" else pieces(),
            headers={"Content-Type": "application/json"},
        )
        following = client.get("/healthz")

    assert refused.status_code == 413
    assert refused.json()["error"] == "PayloadTooLarge"
    assert refused.headers["Connection"] == "close"
    assert following.status_code == 200


# --- an Idempotency-Key header sent twice ----------------------------------------


@pytest.mark.parametrize(
    "key_lines",
    [
        ("Idempotency-Key: twice-1", "Idempotency-Key: twice-1"),
        ("Idempotency-Key: twice-2", "Idempotency-Key:"),
        ("Idempotency-Key:", "Idempotency-Key: twice-3"),
        ('Idempotency-Key: "twice-4"', 'Idempotency-Key: "twice-4"'),
    ],
    ids=["same-key-twice", "key-then-empty", "empty-then-key", "structured-twice"],
)
def test_an_idempotency_key_sent_twice_is_refused_and_creates_nothing(
    service: LiveService, api: Api, key_lines: tuple[str, str]
) -> None:
    request = command("POST /v1/orders HTTP/1.1", ORDER_BODY, *key_lines, token=api.token)

    after = answer_then_reuse(service, request, [ORDER_BODY])

    assert after.answer is not None
    assert after.answer.status == 400, after.answer.body
    assert after.answer.headers["content-type"] == "application/problem+json"
    assert json.loads(after.answer.body)["error"] == "IdempotencyKeyInvalid"
    after.assert_truthful()
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0
