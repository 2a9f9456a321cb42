"""What the blocking and the asyncio clients share: everything but sending and sleeping.

Each public call becomes a :class:`_Call` (method, path, body bytes, key
and ``If-Match``, fixed before the first attempt), and an :class:`_Attempts` keeps the
retry loop's books: it asks the :class:`RetryPolicy` after each outcome,
tells ``on_retry``, and raises :class:`RetriesExhausted` when the policy
says stop. The two clients' loops are then a few lines each, differing
only by ``await``.
"""

import dataclasses
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from order_service_client._version import __version__
from order_service_client.errors import (
    ApiError,
    FeedCheckpointLost,
    KeyLifetimeOver,
    OperationTimeout,
    RetriesExhausted,
    ValidationFailed,
    error_from_response,
    problem_of,
)
from order_service_client.keys import (
    DEFAULT_RETENTION,
    KeyStore,
    LeasingKeyStore,
    MemoryKeyStore,
    new_key,
)
from order_service_client.policy import ServicePolicy, max_age
from order_service_client.retry import RetryEvent, RetryPolicy, parse_retry_after, transient

USER_AGENT = f"order-service-client/{__version__} httpx/{httpx.__version__}"

# The contract's key syntax (§3 rule 1), checked here so that a bad key is
# a ValueError at the call rather than a 400 from the service.
_MAX_KEY_LENGTH = 255

# A failed connect is known within seconds; waiting longer only delays
# the retry on another connection.
_CONNECT_TIMEOUT_S = 5.0

# An attempt never gets less time than this, even right at the deadline.
_MIN_ATTEMPT_TIMEOUT_S = 0.01

# Operation statuses that are not final. The service has only
# "processing"; "pending" is waited on too, in case a kind ever uses it.
_UNFINISHED = frozenset({"processing", "pending"})

# Seconds between polls of an operation whose answer has no Retry-After
# (the service sends one while processing), and the least ever waited.
_DEFAULT_POLL_S = 1.0
_MIN_POLL_S = 0.05
# What wait() keeps of its timeout for a last poll when the Retry-After
# reaches past it: the service answers a poll in milliseconds, and a second
# covers a slow network, so the last look comes at the end of the budget
# rather than one Retry-After (up to 30 s) before it.
_LAST_POLL_S = 1.0


@dataclass(frozen=True)
class CommandResult:
    """The service's final, successful answer to a command.

    :ivar status: ``201`` (created), ``200`` (done, or already so) or
        ``202`` (accepted: an operation to :meth:`wait` for).
    :ivar body: the answer's JSON, as the service sent it (camelCase).
    :ivar headers: the answer's headers (``Location``, ``Retry-After`` …).
    :ivar key: the ``Idempotency-Key`` every attempt carried.
    :ivar replayed: the answer is the stored one of an earlier request
        with this key (``Idempotent-Replayed: true``): it executed nothing.
    :ivar attempts: how many attempts it took, 1 when none was retried.
    """

    status: int
    body: dict[str, Any]
    headers: httpx.Headers
    key: str
    replayed: bool
    attempts: int


@dataclass(frozen=True)
class Versioned:
    """A read's answer with its version: the body and the ``ETag`` it was served with.

    Pass :attr:`etag` as ``if_match`` to a command that changes the
    resource (``cancel``, ``put_order``) to have it done only to the
    version read, and refused with :class:`PreconditionFailed` otherwise.

    :ivar body: the answer's JSON, as the service sent it (camelCase).
    :ivar etag: the ``ETag`` header as sent (a quoted strong tag, such as
        ``"3f2a…"``), ``None`` if the answer had none (something in front
        of the service dropped it). ``if_match=None`` sends no precondition,
        so check for ``None`` where the command must be conditional.
    :ivar headers: the answer's headers.
    """

    body: dict[str, Any]
    etag: str | None
    headers: httpx.Headers


@dataclass(frozen=True)
class _Call:
    """One call, fixed before its first attempt: every retry sends exactly this.

    ``if_match`` too: a retry is the same request, conditional on the same
    version. The service answers a retry from the key's stored outcome
    before it looks at ``If-Match``, so an attempt that changed the
    resource and lost its answer is reported, not refused as stale.
    """

    method: str
    path: str
    content: bytes | None = None
    key: str | None = None
    if_match: str | None = None
    # Seconds since the key's first use, when the call was made: 0 for a key
    # of this call, what the key store tells for an intent's. No attempt
    # under the key starts past the service's retention counted from its
    # first use (docs/SPECIFICATION.md §3 rule 15). None: a read, no key.
    key_age: float | None = None

    @property
    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.key is not None:
            headers["Content-Type"] = "application/json"
            headers["Idempotency-Key"] = self.key
        if self.if_match is not None:
            headers["If-Match"] = self.if_match
        return headers


def _path(template: str, *ids: str) -> str:
    # An id is one path segment, whatever it holds: "../" or "?" in an id
    # must not reach another resource.
    return template.format(*(quote(value, safe="") for value in ids))


def _feed_path(*, after: str | None, type: str | None, page_size: int) -> str:
    """``GET /v1/events``: a page of ``page_size`` events of ``type`` after ``after``.

    ``type=None`` keeps every type; ``after=None`` reads from the feed's start.
    """
    query: dict[str, str | int] = {"pageSize": page_size}
    if type is not None:
        query["type"] = type
    if after is not None:
        query["after"] = after
    return "/v1/events?" + urlencode(query)


def _order_body(
    *, customer_id: str, currency: str, items: Sequence[Mapping[str, object]]
) -> dict[str, Any]:
    """The body of ``POST /v1/orders`` and of ``PUT /v1/orders/{id}``, which is the same."""
    return {
        "customerId": customer_id,
        "items": [dict(item) for item in items],
        "currency": currency,
    }


def _check_key(key: str) -> str:
    if not 1 <= len(key) <= _MAX_KEY_LENGTH or not all("!" <= c <= "~" and c != "," for c in key):
        raise ValueError(
            f"an Idempotency-Key is 1 to {_MAX_KEY_LENGTH} visible ASCII characters"
            " (! to ~, no comma)"
        )
    return key


def _operation_id(operation: "str | Mapping[str, Any] | CommandResult") -> str:
    if isinstance(operation, CommandResult):
        operation = operation.body
    if isinstance(operation, str):
        return operation
    # A 202 answer names it operationId; an operation itself, id.
    found = operation.get("operationId") or operation.get("id")
    if not isinstance(found, str) or not found.startswith("op_"):
        raise ValueError("expected an operation id, an operation, or a 202 answer naming one")
    return found


class _Attempts:
    """The books of one call's retry loop: attempts, elapsed time, the policy's verdicts."""

    def __init__(self, core: "_ClientCore", call: _Call, until: float | None) -> None:
        self._core = core
        self.call = call
        self.started = core._clock()
        self.count = 0
        self.policy = core._retry
        # Whether the key's end, not the policy's deadline or the caller's,
        # is what stops the retries.
        self.key_ends_first = False
        if call.key_age is not None and call.key is not None:
            # Past the key's retention the service may have forgotten it,
            # and a retry under it would execute the command again.
            self.retention = core._key_retention()
            left = self.retention - call.key_age
            if left <= 0:
                raise KeyLifetimeOver(
                    key=call.key,
                    method=call.method,
                    path=call.path,
                    first_used_ago=call.key_age,
                    retention=self.retention,
                )
            key_end = self.started + left
            self.key_ends_first = key_end < self.started + self.policy.deadline and (
                until is None or key_end < until
            )
            until = key_end if until is None else min(until, key_end)
        if until is not None and until - self.started < self.policy.deadline:
            # A caller's own deadline (wait's timeout) is never overrun by a retry.
            self.policy = dataclasses.replace(
                self.policy, deadline=max(until - self.started, _MIN_ATTEMPT_TIMEOUT_S)
            )

    def start(self) -> httpx.Timeout:
        """Count an attempt; its timeout, which ends by the deadline at the latest."""
        self.count += 1
        remaining = self.policy.deadline - (self._core._clock() - self.started)
        limit = max(min(self._core._timeout, remaining), _MIN_ATTEMPT_TIMEOUT_S)
        return httpx.Timeout(limit, connect=min(limit, _CONNECT_TIMEOUT_S))

    def after_error(self, error: httpx.TransportError) -> float:
        """The delay before retrying after no answer came; raises when there is no retry."""
        if not transient(error):
            raise error
        return self._delay_or_give_up(
            error, reason=type(error).__name__, status=None, code=None, retry_after=None
        )

    def after_response(self, response: httpx.Response) -> float | None:
        """The delay before retrying after this answer, or ``None``: it is final."""
        status = response.status_code
        if status < 400:
            return None
        problem = problem_of(response) or {}
        code = problem.get("error") if isinstance(problem.get("error"), str) else None
        replayed = response.headers.get("Idempotent-Replayed") == "true"
        if not self.policy.retryable(status=status, error_code=code, replayed=replayed):
            return None
        return self._delay_or_give_up(
            response,
            reason=code if status == 409 and code else str(status),
            status=status,
            code=code,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )

    def _delay_or_give_up(
        self,
        outcome: httpx.TransportError | httpx.Response,
        *,
        reason: str,
        status: int | None,
        code: str | None,
        retry_after: float | None,
    ) -> float:
        elapsed = self._core._clock() - self.started
        delay = self.policy.next_delay(
            self.count,
            status=status,
            error_code=code,
            retry_after=retry_after,
            elapsed=elapsed,
            # Only retryable answers reach here, and a replayed one is not.
            replayed=False,
            rng=self._core._rng,
        )
        if delay is None:
            if isinstance(outcome, httpx.Response):
                error: Exception = error_from_response(outcome, key=self.call.key)
                response: httpx.Response | None = outcome
            else:
                error, response = outcome, None
            if self._stopped_by_the_keys_end():
                raise KeyLifetimeOver(
                    key=self.call.key or "",
                    method=self.call.method,
                    path=self.call.path,
                    first_used_ago=(self.call.key_age or 0.0) + elapsed,
                    retention=self.retention,
                    attempts=self.count,
                    last_error=error,
                ) from error
            raise RetriesExhausted(
                attempts=self.count,
                elapsed=elapsed,
                last_error=error,
                last_response=response,
                method=self.call.method,
                path=self.call.path,
                key=self.call.key,
            ) from error
        if self._core._on_retry is not None:
            self._core._on_retry(
                RetryEvent(
                    attempt=self.count,
                    delay=delay,
                    reason=reason,
                    method=self.call.method,
                    path=self.call.path,
                    key=self.call.key,
                )
            )
        return delay

    def _stopped_by_the_keys_end(self) -> bool:
        # The policy stops at its deadline, or at its count: only the first is the key's end.
        attempts_left = self.policy.max_attempts is None or self.count < self.policy.max_attempts
        return self.key_ends_first and attempts_left


class _ClientCore:
    """Configuration, request building and answer reading, for both clients."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retry: RetryPolicy | None,
        key_store: KeyStore | None,
        timeout: float,
        on_retry: Callable[[RetryEvent], None] | None,
        clock: Callable[[], float],
        rng: random.Random | None,
    ) -> None:
        if not token:
            raise ValueError("a token is required")
        self._base_url = base_url
        self._token = token
        self._retry = retry or RetryPolicy()
        self._key_store: KeyStore = key_store if key_store is not None else MemoryKeyStore()
        self._timeout = timeout
        self._on_retry = on_retry
        self._clock = clock
        # Jitter needs no secrecy, only spread.
        self._rng = rng or random.Random()  # noqa: S311
        # The service's policy as last read, and when to read it again.
        self._policy: ServicePolicy | None = None
        self._policy_read_by = float("-inf")

    # The service's policy (order_service_client.policy).

    def _policy_due(self) -> bool:
        return self._clock() >= self._policy_read_by

    def _take_policy(self, response: httpx.Response | None) -> None:
        """Keep the policy this answer holds; ``None``: no answer came, ask again next time.

        A ``404`` is a service that publishes none: the client counts with
        its key store's retention until the answer's age is up. Any other
        answer that is not the policy (a proxy's ``502``) keeps what was read
        before, and the next command asks again.
        """
        if response is None:
            return
        policy = ServicePolicy.from_response(response)
        if policy is None and response.status_code != 404:
            return
        self._policy = policy
        self._policy_read_by = self._clock() + max_age(response)

    def _key_retention(self) -> float:
        """Seconds the service keeps a key from its first use: its policy's, or the store's."""
        if self._policy is not None:
            return self._policy.retention_seconds
        return self._store_retention()

    def _store_retention(self) -> float:
        return float(getattr(self._key_store, "retention", DEFAULT_RETENTION))

    def _http_options(self) -> dict[str, Any]:
        return {
            "base_url": self._base_url,
            "headers": {
                "Authorization": f"Bearer {self._token}",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            },
            "timeout": httpx.Timeout(self._timeout, connect=min(self._timeout, _CONNECT_TIMEOUT_S)),
            # Links are ours to follow; a redirect would resend a command to
            # an address nobody chose.
            "follow_redirects": False,
        }

    def _attempts(self, call: _Call, until: float | None = None) -> _Attempts:
        return _Attempts(self, call, until)

    # Requests.

    def _command(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any],
        *,
        key: str | None,
        intent: str | None,
        if_match: str | None = None,
    ) -> _Call:
        # Encoded once, so every attempt sends the same bytes; NaN is no JSON.
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        if key is not None and intent is not None:
            raise ValueError("pass a key or an intent, not both")
        # A key of this call (new, or the caller's) is first used now; an
        # intent's may have been used long ago, which a leasing store tells
        # as the time left of its own retention.
        age = 0.0
        if key is None and intent is not None:
            if isinstance(self._key_store, LeasingKeyStore):
                key, left = self._key_store.lease(intent)
                age = max(self._store_retention() - left, 0.0)
            else:
                key = self._key_store.key_for(intent)
        return _Call(
            method,
            path,
            content=content.encode(),
            key=_check_key(new_key() if key is None else key),
            if_match=if_match,
            key_age=age,
        )

    def _create_order_call(
        self,
        *,
        customer_id: str,
        currency: str,
        items: Sequence[Mapping[str, object]],
        key: str | None,
        intent: str | None,
    ) -> _Call:
        body = _order_body(customer_id=customer_id, currency=currency, items=items)
        return self._command("POST", "/v1/orders", body, key=key, intent=intent)

    def _put_order_call(
        self,
        order_id: str,
        *,
        customer_id: str,
        currency: str,
        items: Sequence[Mapping[str, object]],
        key: str | None,
        intent: str | None,
        if_match: str | None,
    ) -> _Call:
        # The id is not checked here: the service says what it accepts, and
        # quoting keeps whatever it holds in its one path segment.
        body = _order_body(customer_id=customer_id, currency=currency, items=items)
        path = _path("/v1/orders/{}", order_id)
        return self._command("PUT", path, body, key=key, intent=intent, if_match=if_match)

    def _pay_call(
        self,
        *,
        order_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        key: str | None,
        intent: str | None,
    ) -> _Call:
        body = {
            "orderId": order_id,
            "amount": amount,
            "currency": currency,
            "paymentMethod": payment_method,
        }
        return self._command("POST", "/v1/payments", body, key=key, intent=intent)

    def _cancel_call(
        self,
        order_id: str,
        *,
        reason: str,
        key: str | None,
        intent: str | None,
        if_match: str | None,
    ) -> _Call:
        body = {"reason": reason} if reason else {}
        path = _path("/v1/orders/{}/cancel", order_id)
        return self._command("POST", path, body, key=key, intent=intent, if_match=if_match)

    # Answers.

    def _command_result(
        self, call: _Call, response: httpx.Response, attempts: int
    ) -> CommandResult:
        """The result of a command's final answer, or its error raised.

        An intent's key stays in the key store whatever the answer: a rerun
        within the service's retention must get this answer again, not
        execute again (:mod:`order_service_client.keys`).
        """
        if call.key is None:
            raise TypeError("a command needs its key")
        if not response.is_success:
            raise error_from_response(response, key=call.key)
        return CommandResult(
            status=response.status_code,
            body=_json_object(response, key=call.key),
            headers=response.headers,
            key=call.key,
            replayed=response.headers.get("Idempotent-Replayed") == "true",
            attempts=attempts,
        )

    def _read(self, response: httpx.Response) -> dict[str, Any]:
        """The JSON object of a read's answer; its error raised if it is one."""
        if not response.is_success:
            raise error_from_response(response)
        return _json_object(response, key=None)

    def _versioned(self, response: httpx.Response) -> Versioned:
        """A read's answer with its ``ETag``; its error raised if it is one."""
        return Versioned(
            body=self._read(response),
            etag=response.headers.get("ETag"),
            headers=response.headers,
        )

    def _feed_page(
        self, response: httpx.Response, *, after: str | None
    ) -> tuple[list[dict[str, Any]], bool]:
        """A page of the feed read ``after`` an event: its events, and whether more follow.

        An empty page ends the read whatever its ``next``: the next page is
        asked after the page's last event, and there is none to ask after.

        :raises FeedCheckpointLost: the service knows no event ``after``.
        """
        if not response.is_success:
            error = error_from_response(response)
            if (
                after is not None
                and isinstance(error, ValidationFailed)
                and "after" in (error.details or {})
            ):
                raise FeedCheckpointLost(after, error) from error
            raise error
        page = _json_object(response, key=None)
        events: list[dict[str, Any]] = page["results"]
        return events, bool(events) and page.get("next") is not None

    def _poll_delay(
        self,
        operation_id: str,
        operation: dict[str, Any],
        response: httpx.Response,
        *,
        deadline: float,
        timeout: float,
    ) -> float | None:
        """Seconds until the next poll, ``None`` when the operation is final.

        The ``Retry-After`` of the answer, which the service makes grow with
        the operation's age (up to 30 s); cut, when it reaches past the
        deadline, to leave a last poll ``_LAST_POLL_S`` before it.

        :raises OperationTimeout: no poll fits before the deadline any more.
        """
        if operation.get("status") not in _UNFINISHED:
            return None
        delay = parse_retry_after(response.headers.get("Retry-After"))
        delay = max(_DEFAULT_POLL_S if delay is None else delay, _MIN_POLL_S)
        now = self._clock()
        if now + delay < deadline:
            return delay
        # A Retry-After reaching past the budget is cut, so that a last poll
        # still fits in it.
        delay = deadline - _LAST_POLL_S - now
        if delay < _MIN_POLL_S:
            raise OperationTimeout(operation_id, operation, timeout)
        return delay


def _json_object(response: httpx.Response, *, key: str | None) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ApiError(
            f"the {response.status_code} answer is not a JSON object",
            status=response.status_code,
            trace_id=response.headers.get("X-Request-ID"),
            headers=response.headers,
            key=key,
        )
    return body
