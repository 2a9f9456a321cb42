"""The API under test: what to send it (:class:`Options`) and how (:class:`Target`).

Every request the kit sends goes through :meth:`Target.send`, which keeps
what a report needs of it and of its answer as an :class:`Exchange`.
"""

import itertools
import json
import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import httpx

from idempotency_conformance._version import __version__
from idempotency_conformance.body import (
    JSON,
    PLACEHOLDER,
    ConfigError,
    encode,
    fill,
    parse_template,
    varied,
)

USER_AGENT = f"idempotency-conformance/{__version__} httpx/{httpx.__version__}"
KEY_HEADER = "Idempotency-Key"
# The answer's headers a report shows: those the checks judge.
SHOWN_HEADERS = ("Location", "Content-Type", "Retry-After", "Cache-Control")
SHOWN_KEY_CHARS = 64

DEFAULT_BODY = (
    '{"customerId": "conformance-{n}", "items": [{"sku": "ABC", "qty": 2}], "currency": "RUB"}'
)
# A well-formed body the API refuses for its content: a quantity of zero,
# which this service's command answers `400 ValidationError`, a final answer.
DEFAULT_INVALID_BODY = (
    '{"customerId": "conformance-{n}", "items": [{"sku": "ABC", "qty": 0}], "currency": "RUB"}'
)


@dataclass(frozen=True)
class Command:
    """A method and a path template (``/v1/orders/ord_ck{n}``, or ``/v1/orders/{orderId}``)."""

    method: str
    path: str

    @classmethod
    def parse(cls, text: str) -> "Command":
        """``Command("POST", "/v1/orders")`` from ``"POST /v1/orders"``.

        :raises ConfigError: not a method, a space and a path.
        """
        method, _, path = text.strip().partition(" ")
        path = path.strip()
        if not method.isalpha() or not path.startswith("/"):
            raise ConfigError(f"{text!r} is not a command: write it as 'POST /v1/orders'")
        return cls(method.upper(), path)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"

    def matches(self, method: str, template: str) -> bool:
        """Whether a route (method and OpenAPI path template) serves this command.

        ``{n}`` of this command's path and ``{orderId}`` of the template each
        stand for one path segment.
        """
        if method.upper() != self.method:
            return False
        pattern = re.escape(template).replace(r"\{", "{").replace(r"\}", "}")
        pattern = re.sub(r"\{[^/{}]*\}", "[^/]+", pattern)
        return re.fullmatch(pattern, self.path.replace(PLACEHOLDER, "n1")) is not None


@dataclass(frozen=True)
class Options:
    """What the kit is to check, and with which requests. The defaults fit the order service."""

    base_url: str
    token: str
    other_token: str | None = None
    command: Command = Command("POST", "/v1/orders")
    body: str = DEFAULT_BODY
    invalid_body: str = DEFAULT_INVALID_BODY
    vary: str = "/customerId"
    # None: a command of the published policy, else this service's payments.
    other_command: Command | None = None
    # None: the check of another path parameter is skipped.
    path_command: Command | None = Command("PUT", "/v1/orders/ord_ck{n}")
    replay_header: str = "Idempotent-Replayed"
    concurrency: int = 16
    timeout: float = 10.0
    # The longest the concurrency check waits for all its copies' final answers.
    deadline: float = 60.0

    def validate(self) -> None:
        """Parse both templates and apply ``vary`` once, so that a mistake stops the run early.

        :raises ConfigError: what is wrong, in a sentence.
        """
        template = parse_template(self.body, what="--body")
        parse_template(self.invalid_body, what="--invalid-body")
        varied(fill(template, "x"), self.vary)
        if self.concurrency < 2:
            raise ConfigError("--concurrency must be at least 2")


@dataclass(frozen=True)
class Exchange:
    """One request and the answer it got (``status`` None: no answer, ``error`` says why)."""

    method: str
    path: str
    key: str | None
    token: str
    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    replayed: bool = False
    error: str | None = None

    @property
    def location(self) -> str | None:
        return self.headers.get("Location")

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def json(self) -> JSON:
        """The answer's body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


# What an Idempotency-Key header may be sent as: a value, raw bytes, several
# headers (a list), or none.
KeyValue = str | bytes | Sequence[str] | None


class Principal(Enum):
    """Whose token a request carries: the target's own (``--token``) unless told otherwise."""

    OWN = "token"


def _quoted(shown: str) -> str:
    # A long key (the too-long one) by its start and its length.
    if len(shown) > SHOWN_KEY_CHARS:
        return f'"{shown[:SHOWN_KEY_CHARS]}…" ({len(shown)} characters)'
    return f'"{shown}"'


class Target:
    """The API at ``options.base_url``, and the fresh values and keys requests to it use."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.template: JSON = parse_template(options.body, what="--body")
        self.invalid_template: JSON = parse_template(options.invalid_body, what="--invalid-body")
        # Unique to this run, so that two runs against one API never share a value.
        self.run_id = uuid.uuid4().hex[:8]
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self.client = self.new_client()
        # The published policy, once the policy check (or another) has read it.
        self.policy: dict[str, Any] | None = None
        self.policy_read = False

    def new_client(self) -> httpx.Client:
        """A client of its own: one connection pool, for a copy that must not share one."""
        base_url = self.options.base_url.rstrip("/")
        return httpx.Client(
            base_url=base_url,
            timeout=self.options.timeout,
            headers={"User-Agent": USER_AGENT},
            # Plain HTTP needs no certificates: loading them costs each of
            # the concurrency check's clients some 20 ms, which spreads
            # copies meant to arrive together.
            verify=not base_url.startswith("http://"),
        )

    def close(self) -> None:
        self.client.close()

    def fresh(self) -> str:
        """A value no earlier request of any run has used, for ``{n}``."""
        with self._lock:
            return f"{self.run_id}-{next(self._counter)}"

    @staticmethod
    def key(check_id: str) -> str:
        """A new idempotency key, named after the check that uses it."""
        return f"{check_id}-{uuid.uuid4()}"

    def body(self) -> JSON:
        """The valid body, rendered with a fresh ``{n}``."""
        return fill(self.template, self.fresh())

    def invalid_body(self) -> JSON:
        """The body the API refuses for its content, rendered with a fresh ``{n}``."""
        return fill(self.invalid_template, self.fresh())

    def path(self, command: Command) -> str:
        """The command's path with a fresh ``{n}``."""
        return command.path.replace(PLACEHOLDER, self.fresh())

    def send(
        self,
        method: str,
        path: str,
        *,
        key: KeyValue,
        body: bytes | None = None,
        content_type: str | None = "application/json",
        token: str | Principal | None = Principal.OWN,
        client: httpx.Client | None = None,
    ) -> Exchange:
        """Send one request; its exchange, with the transport's error if no answer came."""
        token = self.options.token if token is Principal.OWN else token
        headers: list[tuple[bytes, bytes]] = []
        if token is not None:
            headers.append((b"Authorization", f"Bearer {token}".encode()))
        if content_type is not None and body is not None:
            headers.append((b"Content-Type", content_type.encode()))
        headers.extend(_key_headers(key))
        shown_key = _shown_key(key)
        try:
            response = (client or self.client).request(method, path, content=body, headers=headers)
        except httpx.HTTPError as error:
            shown_token = self._shown_token(token)
            return Exchange(method, path, shown_key, shown_token, None, error=repr(error))
        return self._exchange(method, path, shown_key, token, response)

    def send_json(
        self, command: Command, path: str, value: JSON, *, key: KeyValue, **how: Any
    ) -> Exchange:
        """Send ``value`` as compact JSON to ``command``'s method at ``path``."""
        return self.send(command.method, path, key=key, body=encode(value), **how)

    def _shown_token(self, token: str | None) -> str:
        # Which token, never the token itself: reports are pasted into tickets.
        if token is None:
            return "none"
        if token == self.options.token:
            return "--token"
        return "--other-token" if token == self.options.other_token else "another"

    def _exchange(
        self, method: str, path: str, key: str | None, token: str | None, response: httpx.Response
    ) -> Exchange:
        replay_header = self.options.replay_header
        shown = {name: response.headers[name] for name in SHOWN_HEADERS if name in response.headers}
        replayed = response.headers.get(replay_header, "").strip().lower() == "true"
        if replay_header in response.headers:
            shown[replay_header] = response.headers[replay_header]
        return Exchange(
            method,
            path,
            key,
            self._shown_token(token),
            response.status_code,
            headers=shown,
            body=response.content,
            replayed=replayed,
        )


def _key_headers(key: KeyValue) -> list[tuple[bytes, bytes]]:
    # Bytes, so that a key's raw bytes go out as they are.
    name = KEY_HEADER.encode()
    if key is None:
        return []
    if isinstance(key, bytes):
        return [(name, key)]
    if isinstance(key, str):
        return [(name, key.encode())]
    return [(name, value.encode()) for value in key]


def _shown_key(key: KeyValue) -> str | None:
    """The key as a report shows it: control characters and raw bytes escaped."""
    if key is None:
        return None
    if isinstance(key, bytes):
        return _quoted(repr(key)[2:-1])
    if isinstance(key, str):
        return _quoted(key.encode("unicode_escape").decode())
    return " + ".join(_shown_key(value) or "" for value in key) + " (two headers)"
