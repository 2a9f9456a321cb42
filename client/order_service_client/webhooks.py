"""The consumer's half of the service's webhooks: verify a delivery, then handle it once.

The service delivers each event to every endpoint subscribed to its type as
a ``POST`` of the event's JSON, signed as Standard Webhooks says
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature``), and retries
anything but a ``2xx`` with backoff, up to ``WEBHOOK_MAX_ATTEMPTS`` attempts
(8 by default; the contract's "Events and webhooks"). Two things are the
consumer's to do, in this order:

1. **Believe nothing before the signature.** :class:`WebhookVerifier` checks
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
2. **Handle each event once, though it arrives more than once.** A delivery
   whose ``2xx`` was lost is delivered again, and two deliveries of one
   event may even arrive at once (the first attempt outlived the
   producer's timeout). An :class:`Inbox` runs the application's handler
   once per ``webhook-id``:

   - the id is marked done only when the handler returns: a handler that
     raises, or a process that dies inside it, leaves the id to the next
     delivery, which runs the handler again;
   - a second delivery while the first is being handled runs nothing and
     raises :class:`DeliveryInProgress`; the receiver answers it with a
     non-``2xx`` (``409``), and the producer delivers it again later,
     when it is either done (``2xx`` at once) or, if the first handler
     failed, free to run. Waiting instead would hold a connection open for
     as long as the other handler runs, past the producer's timeout;
   - done ids are kept for ``retention`` (:data:`DEFAULT_INBOX_RETENTION`,
     30 days) and purged as the inbox is used, so its size is bounded by
     one retention period's events.

   :class:`MemoryInbox` keeps the ids for the life of the process;
   :class:`SQLiteInbox` in a file that threads and processes share and that
   survives a restart, with a lease on each claim so that a process killed
   mid-handler blocks its id only until the lease lapses.

**Once, not exactly once.** The inbox marks an id done after the handler
returns, in a transaction of its own. A process that dies between the two,
or a handler that outlives its lease, runs the handler a second time. A
handler whose effect lands in the application's own database can close
that gap by recording the id in the same transaction as the effect (an
inbox on that database: :class:`Inbox` is a protocol); otherwise make the
effect itself safe to repeat.
"""

import base64
import binascii
import json
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
)

from order_service_client.errors import OrderServiceError

__all__ = [
    "DEFAULT_INBOX_LEASE",
    "DEFAULT_INBOX_RETENTION",
    "DEFAULT_WEBHOOK_TOLERANCE",
    "DeliveryInProgress",
    "FailureReason",
    "Inbox",
    "MemoryInbox",
    "SQLiteInbox",
    "WebhookEvent",
    "WebhookVerificationFailed",
    "WebhookVerifier",
]

# standardwebhooks 1.1 refuses a timestamp more than five minutes from now,
# and takes no other value: a tolerance may be shorter (checked here first),
# never longer.
DEFAULT_WEBHOOK_TOLERANCE = 5 * 60.0

# The service keeps events for at least 30 days (GET /v1/events), and its
# retries of a delivery (WEBHOOK_MAX_ATTEMPTS attempts, doubling backoff) end
# long before that: an id purged after 30 days is not delivered again.
DEFAULT_INBOX_RETENTION = 30 * 24 * 60 * 60.0

# How long a SQLiteInbox claim holds an id against other deliveries. A
# receiver must answer within the producer's WEBHOOK_TIMEOUT (10 s by
# default) for the delivery to count, so a handler takes seconds at most:
# three times that covers it. Short, because a process killed mid-handler
# blocks the id (every delivery of it answered "in progress") until its
# claim lapses, and the producer's retries are finite.
DEFAULT_INBOX_LEASE = 30.0

_SECRET_PREFIX = "whsec_"  # noqa: S105 (the secrets' prefix, no secret)
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
# One signature of the space-separated list: "<version>,<base64>" ("v1,…").
_SIGNATURE = re.compile(r"([a-z0-9]+),([A-Za-z0-9+/]+={0,2})")
# Unix seconds, as the contract sends them; 12 digits reach the year 33658.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")

_log = logging.getLogger(__name__)

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


class DeliveryInProgress(OrderServiceError):
    """Another delivery of this event is being handled now: answer this one with a non-``2xx``.

    Nothing ran. The producer delivers the event again later; by then the
    other delivery has either finished (the id is done) or failed (the id
    is free, and that delivery runs the handler).

    :ivar event_id: the event's ``webhook-id``.
    """

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id} is being handled by another delivery")
        self.event_id = event_id


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


def _check_positive(name: str, seconds: float) -> float:
    if not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds")
    return float(seconds)


def _check_event_id(event_id: str) -> None:
    if not event_id:
        raise ValueError("an event id is needed (the delivery's webhook-id)")


@runtime_checkable
class Inbox(Protocol):
    """Runs a handler once per event id, however often the event is delivered."""

    def handle(self, event_id: str, handler: Callable[[], object]) -> bool:
        """Run ``handler`` unless the id is done; mark it done if the handler returns.

        :returns: ``True`` if the handler ran and returned now, ``False`` if
            the id was done already (a redelivery: answer it ``2xx``).
        :raises DeliveryInProgress: another delivery of the id is running it.
        :raises: whatever the handler raised; the id is then not done.
        """
        ...


class MemoryInbox:
    """An inbox in this process's memory, safe to share between threads.

    A restart forgets every id, and a redelivery after it runs the handler
    again: enough for tests, and for handlers whose effect is safe to
    repeat. A claim has no lease: only the process's death outlives a
    handler here, and that takes the claim with it.

    :param retention: seconds a done id is kept after its handler returned.
    :param clock: seconds, for the retention; monotonic, since the ids
        live no longer than the process.
    """

    def __init__(
        self,
        *,
        retention: float = DEFAULT_INBOX_RETENTION,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retention = _check_positive("retention", retention)
        self._clock = clock
        # Oldest first, by the time the handler returned, so the purge stops
        # at the first id still within its retention.
        self._done: OrderedDict[str, float] = OrderedDict()
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def handle(self, event_id: str, handler: Callable[[], object]) -> bool:
        _check_event_id(event_id)
        with self._lock:
            self._purge(self._clock())
            if event_id in self._done:
                return False
            if event_id in self._running:
                raise DeliveryInProgress(event_id)
            self._running.add(event_id)
        # The handler runs outside the lock: other ids go on meanwhile.
        try:
            handler()
        except BaseException:
            with self._lock:
                self._running.discard(event_id)
            raise
        with self._lock:
            self._running.discard(event_id)
            self._done[event_id] = self._clock()
            self._done.move_to_end(event_id)
        return True

    def _purge(self, now: float) -> None:
        while self._done:
            done_at = next(iter(self._done.values()))
            if now - done_at < self.retention:
                return
            self._done.popitem(last=False)


class SQLiteInbox:
    """An inbox in a SQLite file: it survives restarts and is shared by processes and threads.

    An id goes through three states in one row: absent (never run, or its
    handler raised), **claimed** (``owner`` and ``lease_until`` set: a
    delivery is running the handler) and **done** (``done_at`` set). The
    claim is taken in a transaction of its own (``BEGIN IMMEDIATE``, so that
    of two processes delivering one id at once, one claims it and the other
    finds the claim), and committed before the handler runs; the handler
    runs outside any transaction, so other ids go on meanwhile. Its return
    marks the id done; its exception deletes the claim, so the next
    delivery runs it again. A process killed mid-handler leaves its claim,
    and the claim's lease is what frees the id: once ``lease_until`` has
    passed, the next delivery claims it over.

    A handler that runs longer than the lease may be run a second time by a
    delivery that arrives meanwhile: raise ``lease`` above the handler's
    longest run. The first to return marks the id done; a later one logs a
    warning.

    :param path: the database file; created with its table when missing.
    :param retention: seconds a done id is kept after its handler returned
        (a lapsed claim, the same after its lease).
    :param lease: seconds a claim holds the id; see :data:`DEFAULT_INBOX_LEASE`.
    :param timeout: seconds to wait for another process's write lock.
    :param clock: Unix time; wall-clock time, because the file outlives
        the process, and other processes read its times.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention: float = DEFAULT_INBOX_RETENTION,
        lease: float = DEFAULT_INBOX_LEASE,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if os.fspath(path) in {"", ":memory:"}:
            # Every call opens its own connection, which would see its own
            # empty database: use MemoryInbox for ids in memory.
            raise ValueError("SQLiteInbox needs a file; use MemoryInbox in memory")
        self.path = path
        self.retention = _check_positive("retention", retention)
        self.lease = _check_positive("lease", lease)
        self._timeout = timeout
        self._clock = clock
        with self._transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS webhook_inbox ("
                " event_id TEXT PRIMARY KEY,"
                # A claim: who runs the handler (a random id per delivery),
                # and until when (Unix time) the claim holds. NULL once done.
                " owner TEXT,"
                " lease_until REAL,"
                # When the handler returned (Unix time); NULL until then.
                " done_at REAL)"
            )
            # The purge on every use reads the oldest rows only; SQLite uses
            # an index on an expression for a query with the same expression.
            db.execute(
                "CREATE INDEX IF NOT EXISTS webhook_inbox_expiry"
                " ON webhook_inbox (coalesce(done_at, lease_until))"
            )

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # As SQLiteKeyStore's: a connection per call, transactions by hand,
        # IMMEDIATE for the write lock up front, so that what a transaction
        # reads no other process changes before it writes.
        with closing(sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def handle(self, event_id: str, handler: Callable[[], object]) -> bool:
        _check_event_id(event_id)
        owner = self._claim(event_id)
        if owner is None:
            return False
        try:
            handler()
        except BaseException:
            # Should this fail too (the file locked past the timeout), the
            # claim stays and lapses with its lease.
            self._release(event_id, owner)
            raise
        self._finish(event_id, owner)
        return True

    def _claim(self, event_id: str) -> str | None:
        """A new claim's owner, or ``None`` if the id is done.

        :raises DeliveryInProgress: another delivery holds a live claim.
        """
        now = self._clock()
        with self._transaction() as db:
            db.execute(
                "DELETE FROM webhook_inbox WHERE coalesce(done_at, lease_until) <= ?",
                (now - self.retention,),
            )
            row = db.execute(
                "SELECT done_at, lease_until FROM webhook_inbox WHERE event_id = ?", (event_id,)
            ).fetchone()
            if row is not None and row[0] is not None:
                return None
            if row is not None and row[1] > now:
                raise DeliveryInProgress(event_id)
            # None yet, or one whose holder died (or overran): take it over.
            owner = uuid.uuid4().hex
            db.execute(
                "INSERT INTO webhook_inbox (event_id, owner, lease_until) VALUES (?, ?, ?)"
                " ON CONFLICT (event_id) DO UPDATE"
                " SET owner = excluded.owner, lease_until = excluded.lease_until",
                (event_id, owner, now + self.lease),
            )
        return owner

    def _release(self, event_id: str, owner: str) -> None:
        # Only this delivery's claim: one that took over after the lease, or
        # its done mark, is not ours to drop.
        with self._transaction() as db:
            db.execute(
                "DELETE FROM webhook_inbox WHERE event_id = ? AND owner = ?", (event_id, owner)
            )

    def _finish(self, event_id: str, owner: str) -> None:
        now = self._clock()
        with self._transaction() as db:
            row = db.execute(
                "SELECT owner FROM webhook_inbox WHERE event_id = ?", (event_id,)
            ).fetchone()
            if row is None or row[0] != owner:
                _log.warning(
                    "event %s: the handler outlived its %g s lease, and another delivery may"
                    " have run it too; raise SQLiteInbox's lease above the handler's longest run",
                    event_id,
                    self.lease,
                )
            # Done whoever holds the claim now: the handler did return. A
            # done mark already there (the other delivery's) stays as it is.
            db.execute(
                "INSERT INTO webhook_inbox (event_id, done_at) VALUES (?, ?)"
                " ON CONFLICT (event_id) DO UPDATE"
                " SET owner = NULL, lease_until = NULL, done_at = excluded.done_at"
                " WHERE done_at IS NULL",
                (event_id, now),
            )
