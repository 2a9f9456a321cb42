"""The consumer's first half of the service's webhooks: verify a delivery.

The service delivers each event to every endpoint subscribed to its type as
a ``POST`` of the event's JSON, signed as Standard Webhooks says
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature``), and retries
anything but a ``2xx`` with backoff, up to ``WEBHOOK_MAX_ATTEMPTS`` attempts
(8 by default; the contract's "Events and webhooks"). Two things are the
consumer's to do, in this order: verify the delivery (this module), then
handle the event once, though it arrives more than once
(order_service_client.inbox).

**Believe nothing before the signature.** :class:`WebhookVerifier` checks
the delivery with ``standardwebhooks``, the format's maintained
reference verifier, rather than an HMAC written here: the signature over
``"<id>.<timestamp>.<body>"`` under the endpoint's ``whsec_`` secret, and
a timestamp within the tolerance, so a delivery recorded and sent again
later is refused. Only then is the body parsed, into a
:class:`WebhookEvent`, and its ``id`` held to the signed ``webhook-id``.
Every way a delivery can fail to verify raises one exception,
:class:`WebhookVerificationFailed`, whose ``reason`` says which; the
library's own ``ValueError`` and ``binascii.Error`` on a malformed
header do not escape.
"""

import base64
import binascii
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
)

from order_service_client.errors import OrderServiceError

__all__ = [
    "DEFAULT_WEBHOOK_TOLERANCE",
    "FailureReason",
    "WebhookEvent",
    "WebhookVerificationFailed",
    "WebhookVerifier",
]

# standardwebhooks 1.1 refuses a timestamp more than five minutes from now,
# and takes no other value: a tolerance may be shorter (checked here first),
# never longer.
DEFAULT_WEBHOOK_TOLERANCE = 5 * 60.0


_SECRET_PREFIX = "whsec_"  # noqa: S105 (the secrets' prefix, no secret)
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
# One signature of the space-separated list: "<version>,<base64>" ("v1,…").
_SIGNATURE = re.compile(r"([a-z0-9]+),([A-Za-z0-9+/]+={0,2})")
# Unix seconds, as the contract sends them; 12 digits reach the year 33658.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


FailureReason = Literal[
    "missing-header",
    "malformed-header",
    "bad-signature",
    "timestamp-outside-tolerance",
    "malformed-body",
    "id-mismatch",
]


class WebhookVerificationFailed(OrderServiceError):
    """A delivery did not verify: do not act on it, and answer it with a ``4xx``.

    :ivar reason: which check failed: ``"missing-header"`` (a
        ``webhook-*`` header is absent or empty), ``"malformed-header"``
        (a timestamp that is not Unix seconds, a signature list that is not
        ``v1,<base64>`` entries), ``"bad-signature"`` (no signature matches
        the secret and these bytes: a wrong secret, or a body or header
        changed on the way), ``"timestamp-outside-tolerance"`` (signed too
        long ago, or in the future: a replay, or a clock far off),
        ``"malformed-body"`` (signed, but not UTF-8 JSON of an event) or
        ``"id-mismatch"`` (the body's ``id`` is not the signed
        ``webhook-id``).
    """

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: FailureReason = reason
        self.message = message


@dataclass(frozen=True)
class WebhookEvent:
    """One verified event, as the service sent it.

    :ivar id: ``evt_…``, the same as the delivery's ``webhook-id``.
    :ivar type: ``order.created``, ``order.cancelled``, ``payment.succeeded``,
        ``payment.failed`` or ``payment.refunded``; a type added later
        arrives as its name, so match the ones you handle and ignore the rest.
    :ivar created_at: when the effect happened (timezone-aware).
    :ivar data: the resource as its read endpoint showed it then (camelCase).
    :ivar links: ``self`` (``/v1/events/evt_…``) and ``resource``
        (``/v1/orders/ord_…`` …).
    :ivar body: the whole JSON object, fields this version does not name included.
    """

    id: str
    type: str
    created_at: datetime
    data: Mapping[str, Any]
    links: Mapping[str, str]
    body: Mapping[str, Any] = field(repr=False)


class WebhookVerifier:
    """Verifies deliveries to one endpoint with its secret: make one at start-up, share it.

    :param secret: the endpoint's ``whsec_…`` secret, from the ``201`` that
        created it (the service shows it nowhere else).
    :param tolerance: seconds a delivery's ``webhook-timestamp`` may be from
        now, either way; at most :data:`DEFAULT_WEBHOOK_TOLERANCE` (five
        minutes), which standardwebhooks 1.1 enforces whatever is asked.
        The producer signs each attempt when it sends it, so a retry is as
        fresh as a first attempt; a shorter tolerance shrinks the window in
        which a recorded delivery can be replayed, and refuses deliveries
        from a producer whose clock is off by more.
    :raises ValueError: the secret is not ``whsec_`` and base64, or the
        tolerance is not in ``(0, 300]`` seconds: a mistake in the
        configuration, reported before any delivery comes.
    """

    def __init__(self, secret: str, *, tolerance: float = DEFAULT_WEBHOOK_TOLERANCE) -> None:
        if not 0 < tolerance <= DEFAULT_WEBHOOK_TOLERANCE:
            raise ValueError(
                f"tolerance must be more than 0 and at most {DEFAULT_WEBHOOK_TOLERANCE:g} s,"
                " standardwebhooks' own bound"
            )
        # The library would take any string and decode what it can of it: an
        # endpoint's id pasted in place of its secret would then fail every
        # delivery as a bad signature, instead of failing here.
        encoded = secret.removeprefix(_SECRET_PREFIX)
        if not secret.startswith(_SECRET_PREFIX) or not _BASE64.fullmatch(encoded):
            raise ValueError("the secret must be the endpoint's whsec_… secret (base64)")
        try:
            self._webhook = Webhook(secret)
        except (ValueError, EmptyWebhookSecretError):
            raise ValueError("the secret must be the endpoint's whsec_… secret (base64)") from None
        self.tolerance = float(tolerance)

    def verify(self, body: bytes, headers: Mapping[str, str]) -> WebhookEvent:
        """The delivery's event, once its signature, timestamp and id check out.

        :param body: the request's body, the bytes as received (not parsed
            and serialised again: the signature covers the exact bytes).
        :param headers: the request's headers, names in any case.
        :raises WebhookVerificationFailed: the delivery is not one the
            service signed with this secret within the tolerance; its
            ``reason`` says why.
        """
        webhook_id, timestamp, signatures = _delivery_headers(headers)
        self._check_timestamp(timestamp)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise WebhookVerificationFailed("malformed-body", "the body is not UTF-8") from None
        checked = {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures,
        }
        try:
            self._webhook.verify(text, checked, json_parse=False)
        except WebhookVerificationError as error:
            raise _library_failure(error) from None
        except ValueError:
            # binascii.Error and a signature without its comma are
            # ValueErrors; _delivery_headers refuses both first, so this
            # only guards against a library that parses differently.
            raise WebhookVerificationFailed(
                "malformed-header", "webhook-signature could not be read"
            ) from None
        event = _event_from(text)
        if event.id != webhook_id:
            raise WebhookVerificationFailed(
                "id-mismatch", f"the body is event {event.id!r}, signed as {webhook_id!r}"
            )
        return event

    def _check_timestamp(self, timestamp: int) -> None:
        # Checked before the library, which checks its own five minutes again.
        age = time.time() - timestamp
        if age > self.tolerance:
            raise WebhookVerificationFailed(
                "timestamp-outside-tolerance", f"signed {age:.0f} s ago, over {self.tolerance:g} s"
            )
        if -age > self.tolerance:
            raise WebhookVerificationFailed(
                "timestamp-outside-tolerance",
                f"signed {-age:.0f} s in the future, over {self.tolerance:g} s",
            )


def _delivery_headers(headers: Mapping[str, str]) -> tuple[str, int, str]:
    """The three ``webhook-*`` headers, read as the contract writes them.

    :raises WebhookVerificationFailed: one is missing or malformed.
    """
    found: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        # The same header under two spellings must say one thing.
        if lowered in _HEADERS and found.setdefault(lowered, value) != value:
            raise WebhookVerificationFailed("malformed-header", f"{lowered} given twice")
    missing = [name for name in _HEADERS if not found.get(name)]
    if missing:
        raise WebhookVerificationFailed("missing-header", f"no {', '.join(missing)}")
    timestamp = found["webhook-timestamp"]
    if not _TIMESTAMP.fullmatch(timestamp):
        raise WebhookVerificationFailed(
            "malformed-header", f"webhook-timestamp {timestamp[:20]!r} is not Unix seconds"
        )
    signatures = found["webhook-signature"]
    for entry in signatures.split(" "):
        if not _valid_signature(entry):
            raise WebhookVerificationFailed(
                "malformed-header", f"webhook-signature entry {entry[:20]!r} is not v1,<base64>"
            )
    return found["webhook-id"], int(timestamp), signatures


def _valid_signature(entry: str) -> bool:
    matched = _SIGNATURE.fullmatch(entry)
    if matched is None:
        return False
    try:
        base64.b64decode(matched.group(2), validate=True)
    except binascii.Error:  # the wrong padding for its length
        return False
    return True


def _library_failure(error: WebhookVerificationError) -> WebhookVerificationFailed:
    # The library says what failed only in its message. The headers were
    # checked above, so a failure here is the signature, or the timestamp
    # when the clock moved past the tolerance between the two checks.
    message = str(error)
    if "timestamp" in message.lower():
        return WebhookVerificationFailed("timestamp-outside-tolerance", message)
    if "headers" in message.lower():
        return WebhookVerificationFailed("malformed-header", message)
    return WebhookVerificationFailed("bad-signature", message)


def _event_from(text: str) -> WebhookEvent:
    """The event a verified body holds.

    :raises WebhookVerificationFailed: ``malformed-body``.
    """

    def malformed(what: str) -> WebhookVerificationFailed:
        return WebhookVerificationFailed("malformed-body", what)

    try:
        body = json.loads(text)
    except ValueError:
        raise malformed("the body is not JSON") from None
    if not isinstance(body, dict):
        raise malformed("the body is not a JSON object")
    strings = {name: body.get(name) for name in ("id", "type", "createdAt")}
    absent = [name for name, value in strings.items() if not isinstance(value, str) or not value]
    data, links = body.get("data"), body.get("links")
    if absent:
        raise malformed(f"{', '.join(absent)} missing or not a string")
    if not isinstance(data, dict):
        raise malformed("data is not an object")
    if not isinstance(links, dict) or not all(isinstance(v, str) for v in links.values()):
        raise malformed("links is not an object of strings")
    try:
        created_at = datetime.fromisoformat(body["createdAt"])
    except ValueError:
        raise malformed("createdAt is not an ISO 8601 time") from None
    if created_at.tzinfo is None:
        raise malformed("createdAt has no time zone")
    return WebhookEvent(
        id=body["id"], type=body["type"], created_at=created_at, data=data, links=links, body=body
    )
