"""Stand-ins for time and the network, so that the client's loop runs at once and in order.

:class:`FakeTime` is the client's ``clock`` and ``sleep``: time moves only
when the client sleeps (or a request takes ``latency``). :class:`Script` is
an ``httpx.MockTransport`` handler that plays a list of outcomes, one per
request, and records each request with the fake time it was sent at.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx
from order_service_client import KeyStore, OrderServiceClient, RetryEvent, RetryPolicy
from order_service_client.policy import POLICY_PATH

# What a scripted request gets: an answer, or an exception raised as the
# transport would raise it.
Outcome = Callable[[httpx.Request], httpx.Response]

BASE_URL = "http://orders.test"
TOKEN = "osk_test"


@dataclass
class FakeTime:
    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def answer(
    status: int, body: object = None, *, headers: Mapping[str, str] | None = None
) -> Outcome:
    """An answer with a JSON body."""

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body if body is not None else {}, headers=headers)

    return respond


def problem(
    status: int,
    error: str,
    *,
    headers: Mapping[str, str] | None = None,
    details: Mapping[str, object] | None = None,
    **extra: object,
) -> Outcome:
    """A problem+json answer shaped like the service's (api/problem.py)."""
    body: dict[str, object] = {
        "type": f"urn:order-service:problem:{error}",
        "title": error,
        "status": status,
        "error": error,
        "message": f"{error} happened.",
        "traceId": "trace-1",
        **({"details": details} if details else {}),
        **extra,
    }

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status,
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/problem+json", **(headers or {})},
        )

    return respond


def fail(error: type[httpx.TransportError]) -> Outcome:
    """No answer: the transport raises ``error``."""

    def respond(request: httpx.Request) -> httpx.Response:
        raise error(f"scripted {error.__name__}", request=request)

    return respond


@dataclass
class Sent:
    request: httpx.Request
    at: float

    @property
    def key(self) -> str | None:
        key: str | None = self.request.headers.get("Idempotency-Key")
        return key


class Script:
    """Plays ``outcomes`` in order, one per request; the last one again for any further request.

    Reads of the idempotency policy are answered apart, by ``policy`` (by
    default a ``404``: a service that publishes none), and recorded in
    :attr:`policy_reads`, not in :attr:`sent`.
    """

    def __init__(
        self,
        *outcomes: Outcome,
        time: FakeTime,
        latency: float = 0.0,
        policy: Outcome | None = None,
    ) -> None:
        assert outcomes
        self.outcomes = list(outcomes)
        self.time = time
        self.latency = latency
        self.policy = policy or problem(404, "NotFound")
        self.sent: list[Sent] = []
        self.policy_reads: list[Sent] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == POLICY_PATH:
            self.policy_reads.append(Sent(request=request, at=self.time.now))
            return self.policy(request)
        self.sent.append(Sent(request=request, at=self.time.now))
        self.time.now += self.latency
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        return outcome(request)

    @property
    def keys(self) -> list[str | None]:
        return [sent.key for sent in self.sent]


def client_for(
    script: Script,
    *,
    retry: RetryPolicy | None = None,
    key_store: KeyStore | None = None,
    on_retry: Callable[[RetryEvent], None] | None = None,
) -> OrderServiceClient:
    """A client that talks to ``script`` and lives on its fake time."""
    return OrderServiceClient(
        BASE_URL,
        TOKEN,
        retry=retry,
        key_store=key_store,
        transport=httpx.MockTransport(script),
        on_retry=on_retry,
        sleep=script.time.sleep,
        clock=script.time.clock,
    )


ORDER = {"id": "ord_1", "status": "pending", "totalAmount": 3980, "currency": "RUB"}
CREATED = {"status": "succeeded", "orderId": "ord_1", "order": ORDER, "links": {}}
ORDER_LINES = [{"sku": "ABC", "qty": 2}]


def published_policy(*, retention: float, max_age: int = 300) -> Outcome:
    """The service's ``GET /v1/idempotency-policy``, with its retention."""
    return answer(
        200,
        {
            "header": "Idempotency-Key",
            "keyMaxLength": 255,
            "retentionSeconds": retention,
            "waitSeconds": 2.0,
            "lockTimeoutSeconds": 30.0,
            "storagePerPrincipalBytes": 536870912,
            "fingerprint": {
                "canonicalization": "RFC 8785",
                "hash": "SHA-256",
                "covers": ["method", "path", "body"],
            },
            "commands": [{"method": "POST", "path": "/v1/orders"}],
        },
        headers={"Cache-Control": f"public, max-age={max_age}"},
    )
