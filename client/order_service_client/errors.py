"""The errors the client raises: each problem+json answer as a typed exception.

Every error the service answers is ``application/problem+json`` with a
stable machine code in ``error`` (docs/SPECIFICATION.md §2). :func:`error_from_response`
picks the exception class by that code (:data:`ERROR_CLASSES`), and by the
status class when the code is one this client does not know yet, so a new
code on the server never breaks a ``except NotFound`` here::

    OrderServiceError
    ├── ApiError                  an answer: status, error, message, trace_id, details
    │   ├── ClientError           4xx: the request is at fault; do not repeat it as it is
    │   │   ├── BadRequest        400 MalformedJson, IdempotencyKeyRequired, …Invalid
    │   │   │   └── ValidationFailed        400 ValidationError: details, field → messages
    │   │   │       └── FeedCheckpointLost  the feed holds no event `after` names (feed.py)
    │   │   ├── AuthenticationFailed        401 NotAuthenticated, AuthenticationFailed
    │   │   ├── PermissionDenied  403
    │   │   ├── NotFound          404
    │   │   ├── Conflict          409 OrderStateConflict, OrderAlreadyPaid, PaymentInProgress
    │   │   │   ├── IdempotencyKeyConflict  the key was used for another request: .mismatch
    │   │   │   ├── IdempotencyKeyInProgress  retried; seen only in RetriesExhausted
    │   │   │   └── OrderAlreadyExists      a PUT's id holds a different order: .mismatch
    │   │   ├── PreconditionFailed          412: If-Match names a version no longer current
    │   │   ├── Unprocessable     422 UnknownSku, CurrencyMismatch, AmountMismatch, …
    │   │   └── Throttled         429, retried by the client
    │   └── ServerError           5xx
    ├── RetriesExhausted          no final answer within the retry policy: outcome unknown
    ├── KeyLifetimeOver           the service may have forgotten the key: no retry under it
    ├── OperationTimeout          still processing when wait() gave up (a TimeoutError)
    ├── WebhookVerificationFailed a delivery is not the service's: .reason (webhooks.py)
    ├── DeliveryInProgress        another delivery of the event is being handled (webhooks.py)
    └── FeedCheckpointMoved       another reader moved the feed's checkpoint (feed.py)

An answer that is not problem+json (an HTML page from a proxy, a gateway's
``502``) is still an :class:`ApiError` of its status class, with ``error``
``None`` and a message that says so.
"""

import json
from collections.abc import Mapping
from typing import Any

import httpx

from order_service_client.retry import parse_retry_after

__all__ = [
    "ERROR_CLASSES",
    "ApiError",
    "AuthenticationFailed",
    "BadRequest",
    "ClientError",
    "Conflict",
    "FeedCheckpointLost",
    "IdempotencyKeyConflict",
    "IdempotencyKeyInProgress",
    "KeyLifetimeOver",
    "NotFound",
    "OperationTimeout",
    "OrderAlreadyExists",
    "OrderServiceError",
    "PermissionDenied",
    "PreconditionFailed",
    "RetriesExhausted",
    "ServerError",
    "Throttled",
    "Unprocessable",
    "ValidationFailed",
    "error_from_response",
    "problem_of",
]

# How much of a body that is not problem+json an error message quotes.
_QUOTED_CHARS = 200


class OrderServiceError(Exception):
    """The base of every error this package raises about the service's answers."""


class ApiError(OrderServiceError):
    """The service (or something in front of it) answered with an error status.

    :ivar status: the HTTP status.
    :ivar error: the problem's stable code (``"UnknownSku"``); ``None`` when
        the body was not a problem.
    :ivar message: for people.
    :ivar trace_id: the problem's ``traceId``, or the ``X-Request-ID``
        header: quote it when reporting the error.
    :ivar details: the problem's ``details`` (field → messages for a
        validation error, ``mismatch`` for a key conflict or a taken
        order id), if any.
    :ivar body: the whole problem body; empty when it was not JSON.
    :ivar headers: the answer's headers.
    :ivar key: the ``Idempotency-Key`` of the command, ``None`` for a read.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error: str | None = None,
        trace_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        headers: httpx.Headers | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.trace_id = trace_id
        self.details = details
        self.body: dict[str, Any] = dict(body or {})
        self.headers = headers if headers is not None else httpx.Headers()
        self.key = key

    @property
    def replayed(self) -> bool:
        """The service answered from a key's stored outcome (``Idempotent-Replayed: true``)."""
        value: str | None = self.headers.get("Idempotent-Replayed")
        return value == "true"

    @property
    def retry_after(self) -> float | None:
        """``Retry-After`` in seconds, if the answer had one."""
        return parse_retry_after(self.headers.get("Retry-After"))

    def __str__(self) -> str:
        code = f" {self.error}" if self.error else ""
        trace = f" (traceId {self.trace_id})" if self.trace_id else ""
        return f"{self.status}{code}: {self.message}{trace}"


class ClientError(ApiError):
    """A 4xx: the request is at fault, and the same request gets the same answer."""


class BadRequest(ClientError):
    """400: the request could not be read (``MalformedJson``) or its key is missing or invalid."""


class ValidationFailed(BadRequest):
    """400 ``ValidationError``: ``details`` maps each field (camelCase) to its messages.

    For a command it is the command's final outcome: stored under the key
    and replayed to every retry. Send a corrected request under a new key.
    """


class FeedCheckpointLost(ValidationFailed):
    """400 ``ValidationError`` on ``after``: the feed holds no event of that id (any more).

    The service keeps each event ``EVENT_RETENTION`` (30 days) and then
    purges it (docs/SPECIFICATION.md §4 rule 12). A checkpoint that names no
    event is one older than that (a consumer down for a month), or one that
    was never this tenant's: either way the events between it and the
    oldest one kept may be gone unread. Reading from the start would replay
    a month as if it were news, and skipping to the end would lose changes
    without a word, so the read stops here and leaves the choice to you.

    What to do: rebuild your state from the resources, which the service
    keeps (``list_orders``; each order's ``payments``, ``get_payment``);
    then read the feed from its start (``after=None``), applying each event,
    in order, as the state it records (``data``): replayed in order, events
    the rebuild already reflects leave each resource at its latest state
    (:meth:`~order_service_client.feed.SQLiteFeedCheckpoint.reset` runs the
    rebuild and forgets the checkpoint in one transaction).

    :ivar after: the event id the read asked to start after.
    """

    def __init__(self, after: str, error: ValidationFailed) -> None:
        super().__init__(
            f"the feed holds no event {after}: it is older than the service's EVENT_RETENTION"
            " (30 days by default), or was never yours, and events after it may be gone unread."
            " Rebuild your state from the resources (list_orders, get_payment), then read the"
            " feed from its start (after=None), applying each event, in order, as the state it"
            " records.",
            status=error.status,
            error=error.error,
            trace_id=error.trace_id,
            details=error.details,
            body=error.body,
            headers=error.headers,
        )
        self.after = after


class AuthenticationFailed(ClientError):
    """401: no token (``NotAuthenticated``) or one the service does not know.

    Nothing was executed or stored: retry with a valid token and the same key.
    """


class PermissionDenied(ClientError):
    """403: the principal may not do this."""


class NotFound(ClientError):
    """404: no such resource for this principal (another tenant's looks the same)."""


class Conflict(ClientError):
    """409: the resource's state refuses the command (``OrderAlreadyPaid`` …)."""


class IdempotencyKeyConflict(Conflict):
    """409: this key was used before for a different request; nothing was executed.

    It is a bug in the caller: one key must name one intended action. The
    earlier request under the key may have been carried out;
    :meth:`OrderServiceClient.lookup_key` tells what it made.
    """

    @property
    def mismatch(self) -> list[str]:
        """What differs from the key's first request, as JSON Pointers (``/items/0/qty``)."""
        return _pointers(self.details)


class IdempotencyKeyInProgress(Conflict):
    """409: another request with this key is still being executed. The client retries it."""


class OrderAlreadyExists(Conflict):
    """409: ``put_order``'s id holds a different order; nothing was placed.

    The id, not the key, is taken: unlike :class:`IdempotencyKeyConflict`
    this is the command's outcome, stored under the key. An equivalent
    order under the id is no error (``200``); this one differs where
    :attr:`mismatch` says. Choose another id, or read the order that is there.
    """

    @property
    def mismatch(self) -> list[str]:
        """Where the request differs from the order under the id, as JSON Pointers."""
        return _pointers(self.details)


class PreconditionFailed(ClientError):
    """412: ``If-Match`` named a version the resource no longer has, or there is none.

    Nothing was done, and the refusal is the command's outcome, stored under
    its key: read the resource again (its new ``etag``), decide, and send the
    command under a new key, or a new intent: the old one replays this
    refusal for the key's retention.
    """


class Unprocessable(ClientError):
    """422: the business rules refuse the command (``UnknownSku``, ``AmountMismatch`` …)."""


class Throttled(ClientError):
    """429: a rate limit. The client retries it after ``Retry-After``."""


class ServerError(ApiError):
    """5xx: the service, or a proxy in front of it, failed.

    The client retries it unless it is a stored, replayed outcome
    (:attr:`replayed`): a ``500`` the service stored for the command's key
    is final, and replays for the key's retention.
    """


class RetriesExhausted(OrderServiceError):
    """No final answer came within the retry policy's attempts and deadline.

    For a command the outcome is **unknown**: an attempt may have executed
    and lost its answer. Retry later with the same key (``key``, which an
    intent keeps) to learn it, within the service's retention (24 hours by
    default): a new key, or the same one after that, could execute the
    action a second time.

    :ivar attempts: how many attempts were made.
    :ivar elapsed: seconds from the first attempt to giving up.
    :ivar last_error: the last attempt's failure: an :class:`ApiError` for
        an answer, the ``httpx.TransportError`` when none came. It is also
        the exception's ``__cause__``.
    :ivar last_response: the last answer, if the last attempt got one.
    :ivar method: the request's method.
    :ivar path: the request's path.
    :ivar key: the ``Idempotency-Key`` of every attempt; ``None`` for a read.
    """

    def __init__(
        self,
        *,
        attempts: int,
        elapsed: float,
        last_error: Exception,
        last_response: httpx.Response | None,
        method: str,
        path: str,
        key: str | None,
    ) -> None:
        self.attempts = attempts
        self.elapsed = elapsed
        self.last_error = last_error
        self.last_response = last_response
        self.method = method
        self.path = path
        self.key = key
        last = str(last_error) or type(last_error).__name__
        advice = (
            f" The outcome is unknown: retry later with the same Idempotency-Key {key!r}."
            if key is not None
            else ""
        )
        super().__init__(
            f"{method} {path}: no final answer after {attempts} attempt(s) in {elapsed:.1f} s"
            f" (last: {last}).{advice}"
        )


class KeyLifetimeOver(OrderServiceError):
    """No attempt under the key may start: the service's retention since its first use is over.

    The service keeps a key for its retention (the policy's
    ``retentionSeconds``, 24 hours by default) from the key's first request,
    and then forgets it: the same request under it would be a new command,
    and could execute the action a second time. So the client sends nothing
    more under it, whether the retention ended between two retries or
    before a rerun of an intent started.

    What to do: find out whether the action happened from what it would
    have made (the orders, the payments: the key's look-up can no longer
    tell), and if it did not, start it again as a new intent, under a new
    key. An action that may be retried that late is better placed under an
    id you choose (``put_order``), which never expires.

    :ivar key: the key whose lifetime is over.
    :ivar method: the request's method.
    :ivar path: the request's path.
    :ivar first_used_ago: seconds since the key's first use, when the client stopped.
    :ivar retention: the service's retention, in seconds.
    :ivar attempts: the attempts this call made (0: it sent nothing).
    :ivar last_error: the last attempt's failure, if it made any: also the ``__cause__``.
    """

    def __init__(
        self,
        *,
        key: str,
        method: str,
        path: str,
        first_used_ago: float,
        retention: float,
        attempts: int = 0,
        last_error: Exception | None = None,
    ) -> None:
        self.key = key
        self.method = method
        self.path = path
        self.first_used_ago = first_used_ago
        self.retention = retention
        self.attempts = attempts
        self.last_error = last_error
        outcome = (
            "sent nothing"
            if attempts == 0
            else f"stopped after {attempts} attempt(s) without a final answer"
        )
        super().__init__(
            f"{method} {path}: {outcome}. The Idempotency-Key {key!r} was first used"
            f" {first_used_ago:.0f} s ago, and the service keeps keys {retention:.0f} s: a retry"
            " under it could execute the action again. Find out from the resources whether it"
            " happened; if not, start it again under a new key."
        )


class OperationTimeout(OrderServiceError, TimeoutError):
    """The operation was still processing when ``wait()`` ran out of time.

    The work goes on at the service; wait again, or poll it later.

    :ivar operation_id: the operation waited for.
    :ivar operation: its body as last read.
    """

    def __init__(self, operation_id: str, operation: Mapping[str, Any], timeout: float) -> None:
        self.operation_id = operation_id
        self.operation = dict(operation)
        super().__init__(
            f"operation {operation_id} still {operation.get('status')!r} after {timeout:g} s"
        )


# The service's codes (docs/SPECIFICATION.md §2) whose class is not their status's
# default, and the ones worth naming for readers.
ERROR_CLASSES: Mapping[str, type[ApiError]] = {
    "ValidationError": ValidationFailed,
    "MalformedJson": BadRequest,
    "IdempotencyKeyRequired": BadRequest,
    "IdempotencyKeyInvalid": BadRequest,
    "NotAuthenticated": AuthenticationFailed,
    "AuthenticationFailed": AuthenticationFailed,
    "PermissionDenied": PermissionDenied,
    "NotFound": NotFound,
    "IdempotencyKeyConflict": IdempotencyKeyConflict,
    "IdempotencyKeyInProgress": IdempotencyKeyInProgress,
    "OrderStateConflict": Conflict,
    "OrderAlreadyPaid": Conflict,
    "PaymentInProgress": Conflict,
    "OrderAlreadyExists": OrderAlreadyExists,
    "PreconditionFailed": PreconditionFailed,
    "UnknownSku": Unprocessable,
    "CurrencyMismatch": Unprocessable,
    "AmountMismatch": Unprocessable,
    "OrderNotFound": Unprocessable,
    "Throttled": Throttled,
    "InternalError": ServerError,
    "ServiceUnavailable": ServerError,
}

# What an unknown code (or no code) falls back to, by status.
_STATUS_CLASSES: Mapping[int, type[ApiError]] = {
    400: BadRequest,
    401: AuthenticationFailed,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    422: Unprocessable,
    429: Throttled,
}


def problem_of(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's JSON object if it is one (problem+json or plain JSON), else ``None``."""
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if not (media_type == "application/json" or media_type.endswith("+json")):
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _pointers(details: Mapping[str, Any] | None) -> list[str]:
    """``details.mismatch``: the JSON Pointers where two requests differ; none if absent."""
    pointers = (details or {}).get("mismatch")
    if not isinstance(pointers, list):
        return []
    return [pointer for pointer in pointers if isinstance(pointer, str)]


def _class_for(status: int, code: str | None) -> type[ApiError]:
    if code is not None and code in ERROR_CLASSES:
        return ERROR_CLASSES[code]
    if status in _STATUS_CLASSES:
        return _STATUS_CLASSES[status]
    if 400 <= status < 500:
        return ClientError
    if status >= 500:
        return ServerError
    return ApiError


def error_from_response(response: httpx.Response, *, key: str | None = None) -> ApiError:
    """The exception for an error answer (any status; the caller decides it is an error).

    :param key: the ``Idempotency-Key`` the request carried, to quote in the error.
    """
    status = response.status_code
    trace_id = response.headers.get("X-Request-ID")
    problem = problem_of(response)
    if problem is None:
        media_type = response.headers.get("Content-Type") or "none"
        text = response.text[:_QUOTED_CHARS]
        quoted = f" It begins: {text!r}." if text else " It is empty."
        return _class_for(status, None)(
            f"{response.reason_phrase or 'HTTP error'}; the answer is not a problem+json body "
            f"(Content-Type: {media_type}), so it likely comes from something in front of "
            f"the service.{quoted}",
            status=status,
            trace_id=trace_id,
            headers=response.headers,
            key=key,
        )

    code = problem.get("error") if isinstance(problem.get("error"), str) else None
    message = problem.get("message") or problem.get("title") or response.reason_phrase
    details = problem.get("details")
    return _class_for(status, code)(
        str(message),
        status=status,
        error=code,
        trace_id=str(problem.get("traceId") or trace_id or "") or None,
        details=details if isinstance(details, Mapping) else None,
        body=problem,
        headers=response.headers,
        key=key,
    )
