"""A small idempotent API of the tests' own, to hold the conformance kit to: right, and broken.

It implements just enough of the contract (docs/SPECIFICATION.md §3) for
every check of conformance/ to have something to judge, written apart
from the service so that the kit is shown to judge behaviour, not this
repository's code: bearer tokens of two principals, ``POST /v1/orders``,
``PUT /v1/orders/{id}``, ``GET /v1/orders/{id}``, ``POST /v1/payments``,
keys scoped by principal, an RFC 8785 fingerprint of method, path and
body, stored answers replayed with ``Idempotent-Replayed: true``,
conflicts naming what differs, in-flight copies waiting for the first,
refusals before the command stored nowhere, the policy and the key
look-up. Each :class:`Break` breaks one of those behaviours, and the kit
must fail exactly the checks of that behaviour.

The store is a dict under one :class:`threading.Condition`: the claim of a
key is a look-up and an insert in one critical section, as the database's
unique constraint makes it in the service.
"""

import hashlib
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import unquote

import rfc8785

TOKENS = {"alice-token": "alice", "bob-token": "bob"}
CATALOG = {"ABC": 1990, "XYZ": 50000}
RETENTION_SECONDS = 86400
# How long a copy waits for the copy that executes its key before it is
# told to retry (the service's IDEMPOTENCY_WAIT).
WAIT_SECONDS = 2.0
# How long an execution waits for a second copy of its key to arrive: the
# time a real command takes, during which concurrent copies find the key
# claimed. Short, since every first request pays it when no copy comes.
EXECUTION_SECONDS = 0.02
# How long the check-then-insert variant waits, between its check and its
# insert, for a second copy to pass the same check: long enough for copies
# released together to arrive, so that the race is lost every time.
RACE_WINDOW_SECONDS = 0.1
KEY = re.compile(r"[!-+\--~]{1,255}")  # visible ASCII but the comma (spec §3 rule 1)
ORDER_PATH = re.compile(r"/v1/orders/(?P<id>[^/]+)")
ORDER_ID = re.compile(r"ord_[A-Za-z0-9_-]{1,64}")
COMMANDS = [
    {"method": "POST", "path": "/v1/orders"},
    {"method": "PUT", "path": "/v1/orders/{orderId}"},
    {"method": "POST", "path": "/v1/payments"},
]


class Break(Enum):
    """One behaviour of the contract, broken."""

    MISSING_KEY_ACCEPTED = "a command without a key executes"
    INVALID_KEYS_ACCEPTED = "any header value is a key, and several headers one key"
    REPLAY_UNMARKED = "a replay lacks Idempotent-Replayed"
    REPLAY_OTHER_BYTES = "a replay re-encodes the stored body"
    FAILURES_NOT_STORED = "a 4xx answer is not stored: its repeat executes again"
    RAW_FINGERPRINT = "the fingerprint is over the body's bytes, not its canonical JSON"
    BODY_NOT_FINGERPRINTED = "the fingerprint leaves the body out"
    ROUTE_NOT_FINGERPRINTED = "the fingerprint leaves the method and path out"
    CHECK_THEN_INSERT = "a key is looked up, then inserted: concurrent copies all execute"
    REFUSALS_STORED = "a refusal before the command (media type, JSON) is stored under the key"
    KEYS_NOT_SCOPED = "keys are shared by every principal"
    POLICY_MISSING_COMMAND = "the policy leaves POST /v1/orders out of its commands"
    POLICY_CACHED_TOO_LONG = "the policy may be cached for a day"
    RETENTION_DISAGREES = "keys are kept an hour longer than the policy says"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """A command's request, once its key, media type and JSON have been accepted."""

    principal: str
    method: str
    path: str
    raw: bytes
    body: Any


@dataclass
class Record:
    """A key: whose request claimed it, and its answer once the command ended."""

    fingerprint: str
    request: Request
    created: float
    answer: Answer | None = None


def problem(status: int, error: str, message: str, **extra: Any) -> Answer:
    body = {"error": error, "message": message, "title": error, "status": status, **extra}
    return Answer(status, json.dumps(body).encode(), {"Content-Type": "application/problem+json"})


def created(status: int, location: str, body: dict[str, Any]) -> Answer:
    headers = {"Content-Type": "application/json", "Location": location}
    return Answer(status, json.dumps(body).encode(), headers)


def leaves(value: Any, pointer: str = "") -> dict[str, Any]:
    """Every scalar of a JSON value by its JSON Pointer."""
    pairs: Iterable[tuple[str, Any]]
    if isinstance(value, dict):
        pairs = value.items()
    elif isinstance(value, list):
        pairs = ((str(i), item) for i, item in enumerate(value))
    else:
        return {pointer: value}
    found: dict[str, Any] = {}
    for name, item in pairs:
        escaped = str(name).replace("~", "~0").replace("/", "~1")
        found.update(leaves(item, f"{pointer}/{escaped}"))
    return found


def mismatch(stored: Request, request: Request) -> list[str]:
    """What differs between two requests, as JSON Pointers (spec §3 rule 6)."""
    differs = [
        name for name in ("method", "path") if getattr(stored, name) != getattr(request, name)
    ]
    before, after = leaves(stored.body), leaves(request.body)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return [f"/{name}" for name in differs] + sorted(changed)


class ReferenceApi:
    """The API's logic and state, apart from HTTP."""

    def __init__(self, breaks: frozenset[Break], *, publish_policy: bool) -> None:
        self.breaks = breaks
        self.publish_policy = publish_policy
        self.lock = threading.Condition()
        self.keys: dict[tuple[str | None, str], Record] = {}
        self.arrivals: Counter[tuple[str | None, str]] = Counter()
        self.orders: dict[str, tuple[str, dict[str, Any]]] = {}

    # --- Routing ---------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Message, raw: bytes) -> Answer:
        if method == "GET":
            return self.read(path, self.principal(headers))
        execute = self.command(method, path)
        if execute is None:
            return problem(404, "NotFound", "No such route.")
        principal = self.principal(headers)
        if principal is None:
            return problem(401, "NotAuthenticated", "A bearer token is required.")
        key, refusal = self.key(headers.get_all("Idempotency-Key") or [])
        if refusal is not None:
            return refusal
        media_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if media_type != "application/json":
            refused = problem(415, "UnsupportedMediaType", "Send application/json.")
            return self.refused(principal, key, method, path, raw, refused)
        try:
            body = json.loads(raw)
        except ValueError:
            refused = problem(400, "MalformedJson", "The body is not JSON.")
            return self.refused(principal, key, method, path, raw, refused)
        request = Request(principal, method, path, raw, body)
        if key is None:  # Break.MISSING_KEY_ACCEPTED
            return execute(request)
        return self.idempotent(key, request, execute)

    def command(self, method: str, path: str) -> Callable[[Request], Answer] | None:
        if (method, path) == ("POST", "/v1/orders"):
            return self.create_order
        if (method, path) == ("POST", "/v1/payments"):
            return self.create_payment
        if method == "PUT" and ORDER_PATH.fullmatch(path):
            return self.put_order
        return None

    def principal(self, headers: Message) -> str | None:
        scheme, _, token = (headers.get("Authorization") or "").partition(" ")
        return TOKENS.get(token) if scheme == "Bearer" else None

    def key(self, values: list[str]) -> tuple[str | None, Answer | None]:
        """The request's key, or the refusal of its header (spec §3 rule 1)."""
        invalid = problem(400, "IdempotencyKeyInvalid", "The Idempotency-Key is malformed.")
        if not values:
            if Break.MISSING_KEY_ACCEPTED in self.breaks:
                return None, None
            return None, problem(400, "IdempotencyKeyRequired", "Idempotency-Key is required.")
        if Break.INVALID_KEYS_ACCEPTED in self.breaks:
            return ",".join(values), None
        if len(values) != 1:
            return None, invalid
        value = values[0]
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]  # the draft's structured-field string names the same key
        return (value, None) if KEY.fullmatch(value) else (None, invalid)

    def refused(
        self, principal: str, key: str | None, method: str, path: str, raw: bytes, answer: Answer
    ) -> Answer:
        """A refusal before the command: stored nowhere, unless the variant stores it."""
        if Break.REFUSALS_STORED in self.breaks and key is not None:
            request = Request(principal, method, path, raw, None)
            with self.lock:
                self.keys[(principal, key)] = Record("refused", request, time.time(), answer)
        return answer

    # --- The idempotency protocol -------------------------------------------------------------

    def fingerprint(self, request: Request) -> str:
        route = f"{request.method} {request.path}\n".encode()
        body = request.raw if Break.RAW_FINGERPRINT in self.breaks else rfc8785.dumps(request.body)
        if Break.BODY_NOT_FINGERPRINTED in self.breaks:
            body = b""
        if Break.ROUTE_NOT_FINGERPRINTED in self.breaks:
            route = b""
        return hashlib.sha256(route + body).hexdigest()

    def idempotent(
        self, key: str, request: Request, execute: Callable[[Request], Answer]
    ) -> Answer:
        scope = (None if Break.KEYS_NOT_SCOPED in self.breaks else request.principal, key)
        fingerprint = self.fingerprint(request)
        with self.lock:
            self.arrivals[scope] += 1
            self.lock.notify_all()
            record = self.keys.get(scope)
            claimed = record is None and Break.CHECK_THEN_INSERT not in self.breaks
            if claimed:
                record = self.keys[scope] = Record(fingerprint, request, time.time())
        if record is None:  # Break.CHECK_THEN_INSERT: found nothing, inserts later
            record = self.insert_late(scope, Record(fingerprint, request, time.time()))
            claimed = True
        if claimed:
            return self.run(scope, record, execute)
        return self.repeat(key, record, request, fingerprint)

    def insert_late(self, scope: tuple[str | None, str], record: Record) -> Record:
        # The window between the look-up and the insert, widened until a
        # second copy has looked up the key too (or the window closes).
        with self.lock:
            self.lock.wait_for(lambda: self.arrivals[scope] >= 2, timeout=RACE_WINDOW_SECONDS)
            self.keys[scope] = record
        return record

    def run(
        self, scope: tuple[str | None, str], record: Record, execute: Callable[..., Answer]
    ) -> Answer:
        with self.lock:
            # The command's own time: copies sent at once arrive during it.
            self.lock.wait_for(lambda: self.arrivals[scope] >= 2, timeout=EXECUTION_SECONDS)
        answer = execute(record.request)
        with self.lock:
            if Break.FAILURES_NOT_STORED in self.breaks and 400 <= answer.status < 500:
                del self.keys[scope]
            record.answer = answer
            self.lock.notify_all()
        return answer

    def repeat(self, key: str, record: Record, request: Request, fingerprint: str) -> Answer:
        if record.fingerprint != fingerprint:
            return problem(
                409,
                "IdempotencyKeyConflict",
                "Same Idempotency-Key used with different request payload.",
                idempotencyKey=key,
                details={"mismatch": mismatch(record.request, request)},
            )
        with self.lock:
            self.lock.wait_for(lambda: record.answer is not None, timeout=WAIT_SECONDS)
        if record.answer is None:
            answer = problem(409, "IdempotencyKeyInProgress", "Still running; retry.")
            return Answer(answer.status, answer.body, {**answer.headers, "Retry-After": "1"})
        return self.replay(record.answer)

    def replay(self, stored: Answer) -> Answer:
        body, headers = stored.body, dict(stored.headers)
        if Break.REPLAY_OTHER_BYTES in self.breaks:
            body = json.dumps(json.loads(body), indent=1).encode()
        if Break.REPLAY_UNMARKED not in self.breaks:
            headers["Idempotent-Replayed"] = "true"
        return Answer(stored.status, body, headers)

    # --- The commands ------------------------------------------------------------------------

    def create_order(self, request: Request, order_id: str | None = None) -> Answer:
        refusal = order_refusal(request.body)
        if refusal is not None:
            return refusal
        with self.lock:
            if order_id is not None and order_id in self.orders:
                _, order = self.orders[order_id]
                return created(200, f"/v1/orders/{order_id}", {"order": order})
            order_id = order_id or f"ord_{uuid.uuid4().hex}"
            order = {"id": order_id, **request.body, "status": "pending"}
            self.orders[order_id] = (request.principal, order)
        body = {"status": "succeeded", "orderId": order_id, "order": order}
        return created(201, f"/v1/orders/{order_id}", body)

    def put_order(self, request: Request) -> Answer:
        order_id = request.path.rsplit("/", 1)[1]
        if not ORDER_ID.fullmatch(order_id):
            return problem(400, "ValidationError", "Not an order id.")
        return self.create_order(request, order_id)

    def create_payment(self, request: Request) -> Answer:
        body = request.body
        order_id = body.get("orderId") if isinstance(body, dict) else None
        if order_id not in self.orders:
            return problem(422, "OrderNotFound", "No such order.")
        operation = f"op_{uuid.uuid4().hex}"
        return created(202, f"/v1/operations/{operation}", {"status": "processing"})

    # --- Reads ----------------------------------------------------------------------------

    def read(self, path: str, principal: str | None) -> Answer:
        published = path.startswith(("/v1/idempotency-policy", "/v1/idempotency-keys/"))
        if published and not self.publish_policy:
            return problem(404, "NotFound", "No such route.")
        if path == "/v1/idempotency-policy":
            return self.policy()
        if principal is None:
            return problem(401, "NotAuthenticated", "A bearer token is required.")
        if path.startswith("/v1/idempotency-keys/"):
            return self.lookup(principal, unquote(path.removeprefix("/v1/idempotency-keys/")))
        found = ORDER_PATH.fullmatch(path)
        with self.lock:
            owned = self.orders.get(found["id"]) if found else None
        if owned is None or owned[0] != principal:
            return problem(404, "NotFound", "No such resource.")
        return created(200, path, owned[1])

    def policy(self) -> Answer:
        commands = COMMANDS
        if Break.POLICY_MISSING_COMMAND in self.breaks:
            commands = [c for c in COMMANDS if c["path"] != "/v1/orders"]
        policy = {
            "header": "Idempotency-Key",
            "keyMaxLength": 255,
            "retentionSeconds": RETENTION_SECONDS,
            "waitSeconds": WAIT_SECONDS,
            "lockTimeoutSeconds": 30,
            "storagePerPrincipalBytes": 512 * 1024 * 1024,
            "fingerprint": {
                "canonicalization": "RFC 8785",
                "hash": "SHA-256",
                "covers": ["method", "path", "body"],
            },
            "commands": commands,
        }
        age = 86400 if Break.POLICY_CACHED_TOO_LONG in self.breaks else 300
        headers = {"Content-Type": "application/json", "Cache-Control": f"public, max-age={age}"}
        return Answer(200, json.dumps(policy).encode(), headers)

    def lookup(self, principal: str, key: str) -> Answer:
        with self.lock:
            record = self.keys.get((principal, key))
        if record is None or record.answer is None:
            return problem(404, "NotFound", "No such key.")
        kept = RETENTION_SECONDS + (3600 if Break.RETENTION_DISAGREES in self.breaks else 0)
        body = {
            "key": key,
            "method": record.request.method,
            "path": record.request.path,
            "status": record.answer.status,
            "createdAt": _iso(record.created),
            "expiresAt": _iso(record.created + kept),
        }
        return Answer(200, json.dumps(body).encode(), {"Content-Type": "application/json"})


def order_refusal(body: Any) -> Answer | None:
    """The final 4xx an order body earns, if any: 400 for its shape, 422 for an unknown SKU."""
    shaped = (
        isinstance(body, dict)
        and isinstance(body.get("customerId"), str)
        and isinstance(body.get("currency"), str)
        and isinstance(body.get("items"), list)
        and len(body["items"]) > 0
        and all(_item_shaped(item) for item in body["items"])
    )
    if not shaped:
        return problem(400, "ValidationError", "The order is malformed.")
    if any(item["sku"] not in CATALOG for item in body["items"]):
        return problem(422, "UnknownSku", "No such SKU.")
    return None


def _item_shaped(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("sku"), str):
        return False
    qty = item.get("qty")
    # 2.0 is 2 (RFC 8785 spells them alike), as JSON parsers disagree on it.
    return isinstance(qty, int | float) and qty == int(qty) and 1 <= qty <= 1000


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


# --- HTTP ------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Room for every copy the concurrency check connects at once (the
    # default, 5, resets the connections beyond it).
    request_queue_size = 128
    api: ReferenceApi


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are written apart: with Nagle's algorithm, the
    # body would wait for the client's delayed ACK (40 ms a request).
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.answer()

    def do_POST(self) -> None:
        self.answer()

    def do_PUT(self) -> None:
        self.answer()

    def answer(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        api = cast(_Server, self.server).api
        answer = api.handle(self.command, self.path, self.headers, raw)
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the tests read answers, not access logs


@contextmanager
def reference_server(*breaks: Break, publish_policy: bool = True) -> Iterator[str]:
    """Serve the reference API on 127.0.0.1 in a thread; yields its base URL."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.api = ReferenceApi(frozenset(breaks), publish_policy=publish_policy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
