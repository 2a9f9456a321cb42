"""Webhooks, the consumer's half: deliveries verified against the reference, each event run once.

Deliveries are signed here by ``standardwebhooks`` itself, the reference
the service signs with, so a verifier that agreed only with itself would
fail. The inboxes are checked as redeliveries would test them: the same id
again, after a handler's exception, from threads and from processes at
once, and after a process killed inside the handler; time moves on a clock
of the test's own. The README's receiver is run as written.
"""

import base64
import importlib.util
import json
import logging
import multiprocessing
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from order_service_client import (
    DEFAULT_INBOX_LEASE,
    DEFAULT_INBOX_RETENTION,
    DeliveryInProgress,
    Inbox,
    MemoryInbox,
    OrderServiceError,
    SQLiteInbox,
    WebhookEvent,
    WebhookVerificationFailed,
    WebhookVerifier,
)
from standardwebhooks import Webhook

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "client" / "README.md"

SECRET = "whsec_" + base64.b64encode(b"the endpoint's secret, 32 bytes!").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"another endpoint's secret, 32 b!").decode()
DAY = 24 * 3600.0

Headers = dict[str, str]
AnyInbox = MemoryInbox | SQLiteInbox


def event_body(event_id: str = "evt_1", **fields: Any) -> bytes:
    """An event's JSON as the service sends it, compact, as bytes."""
    event = {
        "id": event_id,
        "type": "order.created",
        "createdAt": "2026-12-02T10:00:00.123456Z",
        "data": {"id": "ord_1", "status": "pending", "totalAmount": "20.00"},
        "links": {"self": f"/v1/events/{event_id}", "resource": "/v1/orders/ord_1"},
        **fields,
    }
    return json.dumps(event, separators=(",", ":")).encode()


def signed(
    body: bytes, *, secret: str = SECRET, msg_id: str = "evt_1", age: float = 0.0
) -> Headers:
    """The headers of a delivery signed by the reference implementation ``age`` seconds ago."""
    at = datetime.fromtimestamp(int(time.time() - age), tz=UTC)
    signature = Webhook(secret).sign(msg_id, at, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def failure(body: bytes, headers: Headers, *, tolerance: float = 300.0) -> str:
    """The reason a delivery fails for; the test fails if it verifies or raises anything else."""
    with pytest.raises(WebhookVerificationFailed) as raised:
        WebhookVerifier(SECRET, tolerance=tolerance).verify(body, headers)
    return raised.value.reason


# --- Verification ---------------------------------------------------------------


def test_a_delivery_signed_by_the_reference_verifies_into_its_event() -> None:
    body = event_body()

    event = WebhookVerifier(SECRET).verify(body, signed(body))

    assert event == WebhookEvent(
        id="evt_1",
        type="order.created",
        created_at=datetime(2026, 12, 2, 10, 0, 0, 123456, tzinfo=UTC),
        data={"id": "ord_1", "status": "pending", "totalAmount": "20.00"},
        links={"self": "/v1/events/evt_1", "resource": "/v1/orders/ord_1"},
        body=json.loads(body),
    )


def test_header_names_are_read_in_any_case() -> None:
    body = event_body()
    headers = signed(body)

    shouted = {name.upper(): value for name, value in headers.items()}
    titled = {name.title(): value for name, value in headers.items()}

    assert WebhookVerifier(SECRET).verify(body, shouted).id == "evt_1"
    assert WebhookVerifier(SECRET).verify(body, titled).id == "evt_1"


def test_one_matching_signature_among_several_is_enough() -> None:
    # A producer rotating its secret signs with both, space-separated.
    body = event_body()
    good = signed(body)
    other = signed(body, secret=OTHER_SECRET)["webhook-signature"]

    rotating = {**good, "webhook-signature": f"{other} {good['webhook-signature']}"}

    assert WebhookVerifier(SECRET).verify(body, rotating).id == "evt_1"


def test_a_changed_body_is_a_bad_signature() -> None:
    body = event_body()
    headers = signed(body)

    tampered = body.replace(b'"20.00"', b'"0.01"')

    assert tampered != body
    assert failure(tampered, headers) == "bad-signature"


def test_another_endpoints_secret_is_a_bad_signature() -> None:
    body = event_body()

    assert failure(body, signed(body, secret=OTHER_SECRET)) == "bad-signature"


def test_a_signature_of_another_version_only_is_a_bad_signature() -> None:
    body = event_body()
    headers = signed(body)
    v2 = "v2," + headers["webhook-signature"].split(",", 1)[1]

    assert failure(body, {**headers, "webhook-signature": v2}) == "bad-signature"


def test_a_changed_id_or_timestamp_header_is_a_bad_signature() -> None:
    # Both are signed with the body: neither can be moved to another delivery.
    body = event_body()
    headers = signed(body)
    earlier = str(int(headers["webhook-timestamp"]) - 1)

    assert failure(body, {**headers, "webhook-timestamp": earlier}) == "bad-signature"
    assert failure(body, {**headers, "webhook-id": "evt_2"}) == "bad-signature"


@pytest.mark.parametrize(
    ("age", "tolerance"),
    [
        (10 * 60, 300.0),  # beyond the library's own five minutes
        (-10 * 60, 300.0),  # signed in the future
        (120, 60.0),  # within five minutes, beyond the tolerance asked for
        (-120, 60.0),
    ],
)
def test_a_timestamp_outside_the_tolerance_is_refused(age: float, tolerance: float) -> None:
    body = event_body()

    assert failure(body, signed(body, age=age), tolerance=tolerance) == (
        "timestamp-outside-tolerance"
    )


def test_a_timestamp_within_a_shorter_tolerance_verifies() -> None:
    body = event_body()

    event = WebhookVerifier(SECRET, tolerance=60.0).verify(body, signed(body, age=30))

    assert event.id == "evt_1"


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_or_empty_header_is_refused(missing: str) -> None:
    body = event_body()
    headers = signed(body)
    without = {name: value for name, value in headers.items() if name != missing}

    assert failure(body, without) == "missing-header"
    assert failure(body, {**headers, missing: ""}) == "missing-header"


@pytest.mark.parametrize(
    "signature",
    [
        "v1",  # no comma: the library's own ValueError
        "v1,a,b",  # two commas: the same
        "v1,abcde",  # base64 of a wrong length: the library's binascii.Error
        "v1,not base64!",
        "v1,AAAA  v1,AAAA",  # an empty entry between two spaces
        " v1,AAAA",
        "v1,AAAA ",
        "V1,AAAA",
        "v1,=AAA",
        "v1,AA=A",
        "\u00e9,AAAA",
    ],
)
def test_a_malformed_signature_header_raises_only_the_typed_error(signature: str) -> None:
    body = event_body()
    headers = {**signed(body), "webhook-signature": signature}

    assert failure(body, headers) == "malformed-header"


def test_the_library_alone_lets_a_malformed_signature_escape_untyped() -> None:
    # Why the verifier reads the header itself: standardwebhooks 1.1 raises
    # ValueError, no WebhookVerificationError, for a signature without a comma.
    body = event_body()
    headers = {**signed(body), "webhook-signature": "v1"}

    with pytest.raises(ValueError, match="unpack"):
        Webhook(SECRET).verify(body, headers)


@pytest.mark.parametrize("timestamp", ["soon", "1.7e9", "1764669600.5", "-1", " 1764669600"])
def test_a_timestamp_that_is_not_unix_seconds_is_refused(timestamp: str) -> None:
    # The library would read a float, and sign its floor: only integers here.
    body = event_body()
    headers = {**signed(body), "webhook-timestamp": timestamp}

    assert failure(body, headers) == "malformed-header"


def test_a_header_given_twice_with_two_values_is_refused() -> None:
    body = event_body()
    headers = signed(body)

    doubled = {**headers, "Webhook-Id": "evt_2"}

    assert failure(body, doubled) == "malformed-header"


def test_a_body_signed_under_another_id_is_an_id_mismatch() -> None:
    # Signed as evt_2, with evt_1's body: the inbox would record the wrong id.
    body = event_body("evt_1")

    assert failure(body, signed(body, msg_id="evt_2")) == "id-mismatch"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'["evt_1"]',
        b'{"id": "evt_1"}',
        event_body(data=[]),
        event_body(links={"self": 1}),
        event_body(type=None),
        event_body(createdAt="yesterday"),
        event_body(createdAt="2026-12-02T10:00:00"),  # no time zone
    ],
)
def test_a_signed_body_that_is_not_an_event_is_malformed(body: bytes) -> None:
    assert failure(body, signed(body)) == "malformed-body"


def test_a_body_that_is_not_utf8_is_malformed() -> None:
    body = event_body()
    headers = signed(body)

    assert failure(b"\xff" + body, headers) == "malformed-body"


def test_a_verification_failure_is_an_order_service_error_that_says_why() -> None:
    body = event_body()

    with pytest.raises(OrderServiceError, match="bad-signature"):
        WebhookVerifier(SECRET).verify(body, signed(body, secret=OTHER_SECRET))


@pytest.mark.parametrize(
    "secret", ["", "whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whe_0123", "whsec_***"]
)
def test_a_secret_that_is_not_a_whsec_secret_is_refused_at_start_up(secret: str) -> None:
    with pytest.raises(ValueError, match="whsec_"):
        WebhookVerifier(secret)


@pytest.mark.parametrize("tolerance", [0.0, -1.0, 301.0])
def test_a_tolerance_beyond_the_librarys_five_minutes_is_refused(tolerance: float) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        WebhookVerifier(SECRET, tolerance=tolerance)


# --- Inboxes --------------------------------------------------------------------


@dataclass
class Clock:
    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Runs:
    """A handler that records each run of each id."""

    ids: list[str]

    def of(self, event_id: str) -> Callable[[], None]:
        return lambda: self.ids.append(event_id)


@pytest.fixture
def runs() -> Runs:
    return Runs([])


@pytest.fixture(params=["memory", "sqlite"])
def make_inbox(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., AnyInbox]:
    """A factory of inboxes of one kind; SQLite ones share one file, as processes do."""

    def make(
        *,
        retention: float = DEFAULT_INBOX_RETENTION,
        clock: Callable[[], float] | None = None,
        lease: float = DEFAULT_INBOX_LEASE,
    ) -> AnyInbox:
        clock = clock or Clock()
        if request.param == "memory":
            return MemoryInbox(retention=retention, clock=clock)
        path = tmp_path / "inbox.sqlite3"
        return SQLiteInbox(path, retention=retention, lease=lease, clock=clock)

    return make


@pytest.fixture
def inbox(make_inbox: Callable[..., AnyInbox]) -> AnyInbox:
    return make_inbox()


class Blocked:
    """A handler that runs until released, and says when it has started."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.entered.set()
        assert self.release.wait(timeout=30), "never released"


def in_thread(call: Callable[[], bool]) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(call()))
    thread.start()
    return thread, result


def test_both_inboxes_are_inboxes(inbox: AnyInbox) -> None:
    assert isinstance(inbox, Inbox)


def test_a_handler_runs_once_per_id(inbox: AnyInbox, runs: Runs) -> None:
    first = inbox.handle("evt_1", runs.of("evt_1"))

    again = inbox.handle("evt_1", runs.of("evt_1"))
    other = inbox.handle("evt_2", runs.of("evt_2"))

    assert (first, again, other) == (True, False, True)
    assert runs.ids == ["evt_1", "evt_2"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_handler_that_raises_leaves_the_id_to_the_next_delivery(
    inbox: AnyInbox, runs: Runs, error: type[BaseException]
) -> None:
    def crash() -> None:
        runs.ids.append("crashed")
        raise error("the handler failed")

    with pytest.raises(error):
        inbox.handle("evt_1", crash)
    retried = inbox.handle("evt_1", runs.of("evt_1"))

    assert retried is True
    assert runs.ids == ["crashed", "evt_1"]
    assert inbox.handle("evt_1", runs.of("evt_1")) is False


def test_a_delivery_while_another_runs_the_id_runs_nothing(inbox: AnyInbox, runs: Runs) -> None:
    first = Blocked()
    thread, result = in_thread(lambda: inbox.handle("evt_1", first))
    assert first.entered.wait(timeout=30)

    with pytest.raises(DeliveryInProgress) as raised:
        inbox.handle("evt_1", runs.of("evt_1"))
    first.release.set()
    thread.join(timeout=30)

    assert raised.value.event_id == "evt_1"
    assert runs.ids == []
    assert result == [True]
    assert inbox.handle("evt_1", runs.of("evt_1")) is False


def test_other_ids_go_on_while_one_runs(inbox: AnyInbox, runs: Runs) -> None:
    first = Blocked()
    thread, _ = in_thread(lambda: inbox.handle("evt_1", first))
    assert first.entered.wait(timeout=30)

    other = inbox.handle("evt_2", runs.of("evt_2"))
    first.release.set()
    thread.join(timeout=30)

    assert other is True
    assert runs.ids == ["evt_2"]


def test_threads_delivering_one_id_at_once_run_it_once(inbox: AnyInbox) -> None:
    # The one handler that runs waits until every other delivery has had
    # its answer, so they all arrive while it runs.
    deliveries = 8
    outcomes: list[object] = []
    reported = threading.Condition()
    start = threading.Barrier(deliveries)

    def handler() -> None:
        with reported:
            assert reported.wait_for(lambda: len(outcomes) == deliveries - 1, timeout=30)

    def deliver() -> None:
        start.wait()
        try:
            outcome: object = inbox.handle("evt_1", handler)
        except DeliveryInProgress as error:
            outcome = error
        with reported:
            outcomes.append(outcome)
            reported.notify_all()

    threads = [threading.Thread(target=deliver) for _ in range(deliveries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert outcomes.count(True) == 1
    assert [type(o) for o in outcomes].count(DeliveryInProgress) == deliveries - 1


def test_done_ids_are_kept_for_the_retention_then_purged(
    make_inbox: Callable[..., AnyInbox], runs: Runs
) -> None:
    clock = Clock()
    inbox = make_inbox(retention=30 * DAY, clock=clock)
    inbox.handle("evt_1", runs.of("evt_1"))

    clock.now += 30 * DAY - 1
    within = inbox.handle("evt_1", runs.of("evt_1"))
    clock.now += 1
    after = inbox.handle("evt_1", runs.of("evt_1"))

    assert (within, after) == (False, True)
    assert runs.ids == ["evt_1", "evt_1"]


def test_the_default_retention_outlasts_the_producers_retries_and_its_events() -> None:
    # The service keeps events 30 days, and retries a delivery for far less.
    assert DEFAULT_INBOX_RETENTION >= 30 * DAY


def test_the_memory_inbox_holds_one_retention_period_of_ids(runs: Runs) -> None:
    clock = Clock()
    inbox = MemoryInbox(retention=DAY, clock=clock)
    for number in range(100):
        inbox.handle(f"evt_old_{number}", runs.of("old"))

    clock.now += DAY
    inbox.handle("evt_new", runs.of("new"))

    assert list(inbox._done) == ["evt_new"]


def test_the_sqlite_inbox_holds_one_retention_period_of_ids(tmp_path: Path, runs: Runs) -> None:
    clock = Clock()
    path = tmp_path / "inbox.sqlite3"
    inbox = SQLiteInbox(path, retention=DAY, clock=clock)
    for number in range(100):
        inbox.handle(f"evt_old_{number}", runs.of("old"))
    with pytest.raises(RuntimeError):
        inbox.handle("evt_never_done", _raise)  # leaves no claim behind

    clock.now += DAY + DEFAULT_INBOX_LEASE
    inbox.handle("evt_new", runs.of("new"))

    assert rows(path) == [("evt_new",)]


def _raise() -> None:
    raise RuntimeError("the handler failed")


def rows(path: Path) -> list[tuple[str]]:
    with closing(sqlite3.connect(path)) as db:
        found: list[tuple[str]] = db.execute(
            "SELECT event_id FROM webhook_inbox ORDER BY event_id"
        ).fetchall()
    return found


def test_a_lapsed_claim_is_purged_too(tmp_path: Path) -> None:
    # A process that died mid-handler, and whose event never came again.
    clock = Clock()
    path = tmp_path / "inbox.sqlite3"
    dead = SQLiteInbox(path, retention=DAY, lease=30.0, clock=clock)
    dead._claim("evt_abandoned")

    clock.now += 30.0 + DAY
    SQLiteInbox(path, retention=DAY, clock=clock).handle("evt_new", lambda: None)

    assert rows(path) == [("evt_new",)]


def test_an_id_done_before_a_restart_is_done_after_it(tmp_path: Path, runs: Runs) -> None:
    path = tmp_path / "inbox.sqlite3"
    SQLiteInbox(path).handle("evt_1", runs.of("evt_1"))

    after_the_restart = SQLiteInbox(path)

    assert after_the_restart.handle("evt_1", runs.of("evt_1")) is False
    assert runs.ids == ["evt_1"]


def test_a_handler_that_outlives_its_lease_may_run_twice_and_says_so(
    tmp_path: Path, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    inbox = SQLiteInbox(tmp_path / "inbox.sqlite3", lease=30.0, clock=clock)
    slow = Blocked()
    thread, result = in_thread(lambda: inbox.handle("evt_1", slow))
    assert slow.entered.wait(timeout=30)

    clock.now += 30.0
    took_over = inbox.handle("evt_1", runs.of("evt_1"))
    with caplog.at_level(logging.WARNING, logger="order_service_client.webhooks"):
        slow.release.set()
        thread.join(timeout=30)

    assert took_over is True
    assert result == [True]
    assert "outlived its 30 s lease" in caplog.text
    assert inbox.handle("evt_1", runs.of("evt_1")) is False


@pytest.mark.parametrize(
    "make", [lambda: MemoryInbox(retention=0), lambda: SQLiteInbox(":memory:")]
)
def test_an_inbox_refuses_what_it_cannot_keep(make: Callable[[], Inbox]) -> None:
    with pytest.raises(ValueError, match=r"retention|MemoryInbox"):
        make()


def test_an_empty_id_is_refused(inbox: AnyInbox, runs: Runs) -> None:
    with pytest.raises(ValueError, match="webhook-id"):
        inbox.handle("", runs.of(""))

    assert runs.ids == []


# --- Processes --------------------------------------------------------------------
#
# Each worker is a process of its own, started with "spawn" as a second
# receiver would be: nothing of this process's state is shared with it but
# the files.

IDS = [f"evt_{number}" for number in range(50)]


def _deliver_every_id(inbox_path: str, runs_path: str, start: Any, results: Any) -> None:
    inbox = SQLiteInbox(inbox_path)

    def handler(event_id: str) -> Callable[[], None]:
        def run() -> None:
            with closing(sqlite3.connect(runs_path, timeout=30, isolation_level=None)) as db:
                db.execute(
                    "INSERT INTO runs (event_id, pid) VALUES (?, ?)", (event_id, os.getpid())
                )

        return run

    start.wait()
    outcomes = []
    for event_id in IDS:
        try:
            outcomes.append(str(inbox.handle(event_id, handler(event_id))))
        except DeliveryInProgress:
            outcomes.append("in progress")
    results.put(outcomes)


def _die_inside_the_handler(inbox_path: str, how: str) -> None:
    def die() -> None:
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)

    SQLiteInbox(inbox_path).handle("evt_1", die)


def test_processes_delivering_the_same_ids_at_once_run_each_once(tmp_path: Path) -> None:
    inbox_path, runs_path = tmp_path / "inbox.sqlite3", tmp_path / "runs.sqlite3"
    SQLiteInbox(inbox_path)
    with closing(sqlite3.connect(runs_path)) as db:
        db.execute("CREATE TABLE runs (event_id TEXT NOT NULL, pid INTEGER NOT NULL)")
        db.commit()
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(4), spawn.Queue()

    workers = [
        spawn.Process(
            target=_deliver_every_id, args=(str(inbox_path), str(runs_path), start, results)
        )
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    outcomes = [outcome for _ in workers for outcome in results.get(timeout=120)]
    for worker in workers:
        worker.join(timeout=60)

    with closing(sqlite3.connect(runs_path)) as db:
        counts = dict(db.execute("SELECT event_id, count(*) FROM runs GROUP BY event_id"))
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    assert counts == dict.fromkeys(IDS, 1)
    assert len(outcomes) == 4 * len(IDS)
    assert outcomes.count("True") == len(IDS)
    assert all(SQLiteInbox(inbox_path).handle(event_id, _raise) is False for event_id in IDS)


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_process_killed_inside_the_handler_leaves_the_id_to_a_delivery_after_the_lease(
    tmp_path: Path, runs: Runs, how: str
) -> None:
    path = tmp_path / "inbox.sqlite3"
    SQLiteInbox(path)
    killed = multiprocessing.get_context("spawn").Process(
        target=_die_inside_the_handler, args=(str(path), how)
    )
    killed.start()
    killed.join(timeout=60)

    with pytest.raises(DeliveryInProgress):
        SQLiteInbox(path).handle("evt_1", runs.of("too early"))
    after_the_lease = SQLiteInbox(path, clock=lambda: time.time() + DEFAULT_INBOX_LEASE)

    assert killed.exitcode == (-signal.SIGKILL if how == "sigkill" else 3)
    assert after_the_lease.handle("evt_1", runs.of("evt_1")) is True
    assert runs.ids == ["evt_1"]
    assert SQLiteInbox(path).handle("evt_1", runs.of("evt_1")) is False


# --- The README's receiver --------------------------------------------------------

_PYTHON_BLOCK = "```python\n"


def readme_receiver() -> str:
    """The code of the README's webhooks section, its one python block."""
    section = README.read_text().split("\n## Webhooks: verifying and handling deliveries\n")[1]
    section = section.split("\n## ", 1)[0]
    blocks = [block.split("```", 1)[0] for block in section.split(_PYTHON_BLOCK)[1:]]
    (code,) = blocks
    return code


@dataclass
class Receiver:
    url: str
    module: ModuleType
    log: Path

    def deliver(self, body: bytes, headers: Headers) -> httpx.Response:
        return httpx.post(self.url, content=body, headers=headers, timeout=30, trust_env=False)

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """The README's receiver, imported as its file, serving on a port of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    script = tmp_path / "receiver.py"
    script.write_text(readme_receiver())
    spec = importlib.util.spec_from_file_location("readme_receiver", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = ThreadingHTTPServer(("127.0.0.1", 0), module.Receiver)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_port}/", module, tmp_path / "events.log")
    finally:
        server.shutdown()
        thread.join(timeout=30)
        server.server_close()


def test_the_readme_receiver_handles_an_event_once_and_answers_every_delivery(
    receiver: Receiver,
) -> None:
    body = event_body()

    first = receiver.deliver(body, signed(body))
    again = receiver.deliver(body, signed(body))

    assert (first.status_code, first.text) == (200, "handled")
    assert (again.status_code, again.text) == (200, "handled before")
    assert receiver.lines() == ["evt_1 order.created /v1/orders/ord_1"]


def test_the_readme_receiver_refuses_what_does_not_verify(receiver: Receiver) -> None:
    body = event_body()

    forged = receiver.deliver(body, signed(body, secret=OTHER_SECRET))
    unsigned = receiver.deliver(body, {})

    assert (forged.status_code, forged.text) == (400, "bad-signature")
    assert (unsigned.status_code, unsigned.text) == (400, "missing-header")
    assert receiver.lines() == []


def test_the_readme_receiver_answers_500_when_the_handler_fails_and_runs_it_again(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = event_body()
    record = receiver.module.record

    def fail(event: WebhookEvent) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(receiver.module, "record", fail)
    failed = receiver.deliver(body, signed(body))
    monkeypatch.setattr(receiver.module, "record", record)
    retried = receiver.deliver(body, signed(body))

    assert failed.status_code == 500
    assert (retried.status_code, retried.text) == (200, "handled")
    assert receiver.lines() == ["evt_1 order.created /v1/orders/ord_1"]


def test_the_readme_receiver_answers_409_while_another_delivery_runs_the_event(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = event_body()
    blocked = Blocked()
    record = receiver.module.record

    def slow(event: WebhookEvent) -> None:
        blocked()
        record(event)

    monkeypatch.setattr(receiver.module, "record", slow)
    answers: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answers.append(receiver.deliver(body, signed(body))))
    thread.start()
    assert blocked.entered.wait(timeout=30)

    meanwhile = receiver.deliver(body, signed(body))
    blocked.release.set()
    thread.join(timeout=30)

    assert (meanwhile.status_code, meanwhile.text) == (409, "in progress")
    assert [(answer.status_code, answer.text) for answer in answers] == [(200, "handled")]
    assert receiver.lines() == ["evt_1 order.created /v1/orders/ord_1"]
