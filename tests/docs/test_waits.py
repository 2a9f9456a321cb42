"""docs/WAITS.md, held to the code and the configuration files it quotes.

The page gathers every wait of the service and its bound in one table, and
walks three faults through them with a time for each step. Each default
lives where it is enforced: config/settings.py, a module's constant,
config/gunicorn.py, the nginx template, the HAProxy and Patroni files, the
client's RetryPolicy. This test reads each from there, never from another
document, and compares it with the page:

- every row of the table has its default computed here, and a row added
  without one fails, as does one this test expects and the page lost;
- every name in backquotes followed by a value in parentheses has that value;
- every step of a timeline (``**t ≤ 12 s**``) is the sum this test makes
  of the same defaults;
- no other number is left on the page, so none can drift unseen.

The settings are read in a process of their own with no setting in its
environment (as tests/docs/test_readme.py does), so that a developer's
exported variables cannot make the test pass or fail. Only the database and
broker URLs are given, to reach PostgreSQL's and Redis's branches of the
settings; nothing is connected to.
"""

import inspect
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from order_service_client import OrderServiceClient, RetryPolicy
from order_service_client import _core as client_core

from operations import polling
from tests.docs.sources import settings_probe

ROOT = Path(__file__).resolve().parents[2]
WAITS = ROOT / "docs" / "WAITS.md"
PAGE = WAITS.read_text()
NGINX = (ROOT / "deploy" / "nginx" / "order-service.conf.template").read_text()
HAPROXY = (ROOT / "deploy" / "haproxy" / "haproxy.cfg").read_text()
HAPROXY_PATRONI = (ROOT / "deploy" / "haproxy" / "patroni.cfg").read_text()
CELERY_APP = (ROOT / "config" / "celery.py").read_text()

_SOURCES_SCRIPT = """
import json, re, runpy, django
django.setup()
from django.conf import settings
import config.settings
from api.errors import DATABASE_RETRY_AFTER_SECONDS
from events import addresses, delivery
from idempotency import policy
from operations import attempts, registry
from orders import handlers

names = (
    "IDEMPOTENCY_WAIT", "IDEMPOTENCY_LOCK_TIMEOUT", "IDEMPOTENCY_KEY_TTL",
    "OPERATION_LEASE", "OPERATION_SWEEP_INTERVAL", "OPERATION_STALE_AFTER",
    "PAYMENT_RETRY_BACKOFF", "OPERATION_MAX_ATTEMPTS",
    "WEBHOOK_TIMEOUT", "WEBHOOK_RETRY_BACKOFF", "WEBHOOK_MAX_ATTEMPTS",
)
values = {name: getattr(settings, name) for name in names}
broker = settings.CELERY_BROKER_TRANSPORT_OPTIONS
sqlite = config.settings._database("sqlite:////nowhere/db.sqlite3")["OPTIONS"]
budget = handlers._PROVIDER_RETRY.budget()
gunicorn = runpy.run_path("config/gunicorn.py")
values.update(
    DATABASE_CONNECT_TIMEOUT=settings.DATABASES["default"]["OPTIONS"]["connect_timeout"],
    CELERY_VISIBILITY_TIMEOUT=broker["visibility_timeout"],
    socket_connect_timeout=broker["socket_connect_timeout"],
    socket_timeout=broker["socket_timeout"],
    sqlite_timeout=sqlite["timeout"],
    sqlite_busy_timeout_ms=int(re.search(r"busy_timeout=(\\d+)", sqlite["init_command"])[1]),
    in_progress_retry_after=int(policy.in_progress_retry_after()),
    DATABASE_RETRY_AFTER_SECONDS=DATABASE_RETRY_AFTER_SECONDS,
    operation_max_delay=registry.RetryPolicy().max_delay,
    payment_max_delay=handlers._PROVIDER_RETRY.max_delay,
    payment_pauses=sum(handlers._PROVIDER_RETRY.delay(n) for n in range(1, budget)),
    LONGEST_COUNTDOWN=attempts.LONGEST_COUNTDOWN,
    delivery_max_delay=delivery.RETRY.max_delay,
    RESOLVE_TIMEOUT=addresses.RESOLVE_TIMEOUT,
    RESOLVE_RETRY_AFTER_SECONDS=addresses.RESOLVE_RETRY_AFTER_SECONDS,
    WEB_TIMEOUT=gunicorn["timeout"],
    graceful_timeout=gunicorn["graceful_timeout"],
    keepalive=gunicorn["keepalive"],
)
print(json.dumps(values))
"""


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The defaults that the service's own processes read, each from its source."""
    loaded: dict[str, Any] = settings_probe(
        _SOURCES_SCRIPT,
        tmp_path_factory,
        # Read, never connected to: the PostgreSQL and Redis branches of the settings.
        DATABASE_URL="postgres://nobody@127.0.0.1:1/nothing",
        CELERY_BROKER_URL="redis://127.0.0.1:1/0",
        # config/gunicorn.py makes a directory for the metrics unless one is named.
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path_factory.mktemp("metrics")),
    )
    return loaded


def _seconds_in(text: str, pattern: str) -> float:
    """The seconds a configuration file sets where ``pattern`` (one group, ``\\d+``) matches."""
    found = re.findall(pattern, text, re.MULTILINE)
    assert len(found) == 1, f"{pattern!r} matches {len(found)} times, not once"
    return float(found[0])


def _nginx(directive: str) -> float:
    return _seconds_in(NGINX, rf"^\s*{directive} (\d+)s;")


def _haproxy(timeout: str) -> float:
    return _seconds_in(HAPROXY, rf"^\s*timeout {timeout} (\d+)s$")


def _patroni() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "deploy" / "patroni" / "patroni.yml").read_text())
    dcs: dict[str, Any] = loaded["bootstrap"]["dcs"]
    return dcs


def _proxies_retry_after() -> set[int]:
    """The ``Retry-After`` values nginx's and HAProxy's own 502, 503 and 504 carry."""
    block = re.search(r"map \$status \$order_service_retry_after \{(.*?)\}", NGINX, re.DOTALL)
    assert block is not None, "the nginx template has no Retry-After map"
    nginx = dict(re.findall(r"^\s*(\d{3}) (\d+);", block[1], re.MULTILINE))
    haproxy = re.findall(r"http-error status (50[234]) .* hdr Retry-After (\d+)$", HAPROXY, re.M)
    assert sorted(nginx) == ["502", "503", "504"]
    assert sorted(status for status, _ in haproxy) == ["502", "503", "504"]
    return {int(value) for value in [*nginx.values(), *(value for _, value in haproxy)]}


def _default_of(function: Any, parameter: str) -> float:
    return float(inspect.signature(function).parameters[parameter].default)


def s(seconds: float) -> str:
    """``2 s``, ``0.1 s``: seconds as the page writes them."""
    return f"{seconds:g} s"


def _client() -> dict[str, float]:
    policy = RetryPolicy()
    return {
        "deadline": policy.deadline,
        "base_delay": policy.base_delay,
        "max_delay": policy.max_delay,
        "timeout": _default_of(OrderServiceClient.__init__, "timeout"),
        "connect": client_core._CONNECT_TIMEOUT_S,
        "wait": _default_of(OrderServiceClient.wait, "timeout"),
    }


def expected_table(code: dict[str, Any]) -> dict[str, str]:
    """Each row of the table, by its first cell: its default as the sources make it."""
    client, patroni = _client(), _patroni()
    web_check = re.search(r"default-server check inter (\d+)s .*\bfall (\d+)\b", HAPROXY)
    db_check = re.search(r"default-server inter (\d+)s fall (\d+) rise (\d+)", HAPROXY_PATRONI)
    reconnect = re.search(r"interval_start=(\d+), interval_step=0, interval_max=(\d+)", CELERY_APP)
    assert web_check is not None, "deploy/haproxy/haproxy.cfg no longer checks as it did"
    assert db_check is not None, "deploy/haproxy/patroni.cfg no longer checks as it did"
    assert reconnect is not None, "config/celery.py no longer reconnects as it did"
    (proxies_retry_after,) = _proxies_retry_after()
    assert reconnect[1] == reconnect[2], "the reconnection's interval is no longer constant"
    assert code["sqlite_busy_timeout_ms"] == code["sqlite_timeout"] * 1000
    client_edge = {_nginx(d) for d in ("client_header_timeout", "client_body_timeout")}
    assert client_edge == {_nginx("send_timeout")}, "nginx's client timeouts differ now"
    ttl_hours, rest = divmod(code["IDEMPOTENCY_KEY_TTL"], 3600)
    assert rest == 0, "the retention is no longer whole hours: say it in seconds alone"
    return {
        "The client: a call's retries, in all": s(client["deadline"]),
        "The client: the pause between two retries": (
            f"{s(client['base_delay'])}, doubling, at most {s(client['max_delay'])}"
        ),
        "The client: one attempt": f"{s(client['timeout'])}; connect {s(client['connect'])}",
        "The client: polling an operation": s(client["wait"]),
        "nginx: a client sending its request, or reading the answer": s(_nginx("send_timeout")),
        "nginx: connecting to the service": s(_nginx("proxy_connect_timeout")),
        "nginx: the service's answer": s(_nginx("proxy_read_timeout")),
        "HAProxy: a client's whole request": s(_haproxy("http-request")),
        "HAProxy: connecting to a web replica": s(_haproxy("connect")),
        "HAProxy: the service's answer": s(_haproxy("server")),
        "HAProxy: a web replica that fails its health check": (
            f"every {web_check[1]} s, out after {web_check[2]} failures"
        ),
        "The proxies' `Retry-After` on their own `502`, `503` and `504`": s(proxies_retry_after),
        "gunicorn: a worker's main loop": s(code["WEB_TIMEOUT"]),
        "gunicorn: requests in flight at a restart": s(code["graceful_timeout"]),
        "gunicorn: an idle kept-alive connection": s(code["keepalive"]),
        "The key's wait: a duplicate waiting for the request that holds its key": s(
            code["IDEMPOTENCY_WAIT"]
        ),
        "`Retry-After` of `409 IdempotencyKeyInProgress`": s(code["in_progress_retry_after"]),
        "Any other lock wait of a command (an order's row lock)": s(code["IDEMPOTENCY_WAIT"]),
        "Each statement of a command": s(code["IDEMPOTENCY_LOCK_TIMEOUT"]),
        "Each idle gap in a command's transaction": s(code["IDEMPOTENCY_LOCK_TIMEOUT"]),
        "Connecting to PostgreSQL": s(code["DATABASE_CONNECT_TIMEOUT"]),
        "`Retry-After` of `503 ServiceUnavailable`": s(code["DATABASE_RETRY_AFTER_SECONDS"]),
        "SQLite (the development default): waiting for the one writer": s(code["sqlite_timeout"]),
        "A key's retention": f"{s(code['IDEMPOTENCY_KEY_TTL'])} ({ttl_hours} h)",
        "Publishing a message: connecting to Redis, and each call": (
            f"{s(code['socket_connect_timeout'])}; {s(code['socket_timeout'])}"
        ),
        "A worker reconnecting to a lost broker": f"every {reconnect[1]} s, without end",
        "Redis giving a message that a worker took, and never acknowledged, to another": s(
            code["CELERY_VISIBILITY_TIMEOUT"]
        ),
        "A worker's lease on an operation": s(code["OPERATION_LEASE"]),
        "The sweep, in every worker": s(code["OPERATION_SWEEP_INTERVAL"]),
        "A message presumed lost": s(code["OPERATION_STALE_AFTER"]),
        "The pause between two attempts of a payment or a refund": (
            f"{s(code['PAYMENT_RETRY_BACKOFF'])}, doubling, at most {s(code['payment_max_delay'])}"
        ),
        "An operation's attempts": str(code["OPERATION_MAX_ATTEMPTS"]),
        "A retry's message held in a worker": s(code["LONGEST_COUNTDOWN"]),
        "A look-up the provider cannot answer": s(code["payment_max_delay"]),
        "`Retry-After` of a processing operation": (
            f"{s(polling.retry_after_seconds(0))} for {s(polling.QUICK_SECONDS)},"
            f" then the age divided by {polling.AGE_DIVISOR:g} in whole seconds,"
            f" at most {s(polling.MAX_RETRY_AFTER_SECONDS)}"
        ),
        "One webhook delivery attempt, in all": s(code["WEBHOOK_TIMEOUT"]),
        "The pause between two delivery attempts": (
            f"{s(code['WEBHOOK_RETRY_BACKOFF'])}, doubling, at most"
            f" {s(code['delivery_max_delay'])} ({code['delivery_max_delay'] / 3600:g} h)"
        ),
        "A delivery's attempts": str(code["WEBHOOK_MAX_ATTEMPTS"]),
        "Resolving a webhook endpoint's host": s(code["RESOLVE_TIMEOUT"]),
        "Patroni: the leader key": s(patroni["ttl"]),
        "Patroni: its loop": s(patroni["loop_wait"]),
        "Patroni: a leader that cannot reach etcd": s(patroni["retry_timeout"]),
        "HAProxy before PostgreSQL: a node's health check": (
            f"every {db_check[1]} s, out after {db_check[2]} failures, in after {db_check[3]}"
        ),
        "PgBouncer: a client waiting for a server connection": "none in this repository",
    }


def named(code: dict[str, Any]) -> dict[str, str]:
    """The value the page may give in parentheses after each name in backquotes."""
    client, patroni = _client(), _patroni()
    return {
        "IDEMPOTENCY_WAIT": s(code["IDEMPOTENCY_WAIT"]),
        "IDEMPOTENCY_LOCK_TIMEOUT": s(code["IDEMPOTENCY_LOCK_TIMEOUT"]),
        "DATABASE_CONNECT_TIMEOUT": s(code["DATABASE_CONNECT_TIMEOUT"]),
        "DATABASE_RETRY_AFTER_SECONDS": s(code["DATABASE_RETRY_AFTER_SECONDS"]),
        "CELERY_VISIBILITY_TIMEOUT": s(code["CELERY_VISIBILITY_TIMEOUT"]),
        "OPERATION_LEASE": s(code["OPERATION_LEASE"]),
        "OPERATION_SWEEP_INTERVAL": s(code["OPERATION_SWEEP_INTERVAL"]),
        "OPERATION_STALE_AFTER": s(code["OPERATION_STALE_AFTER"]),
        "OPERATION_MAX_ATTEMPTS": str(code["OPERATION_MAX_ATTEMPTS"]),
        "RESOLVE_RETRY_AFTER_SECONDS": s(code["RESOLVE_RETRY_AFTER_SECONDS"]),
        "WEB_TIMEOUT": s(code["WEB_TIMEOUT"]),
        "registry.RetryPolicy.max_delay": s(code["payment_max_delay"]),
        "RetryPolicy.max_delay": s(client["max_delay"]),
        "RetryPolicy.deadline": s(client["deadline"]),
        "OrderServiceClient(timeout=…)": s(client["timeout"]),
        "ttl": s(patroni["ttl"]),
        "loop_wait": s(patroni["loop_wait"]),
        "timeout server": s(_haproxy("server")),
        "proxy_read_timeout": s(_nginx("proxy_read_timeout")),
    }


def timelines(code: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """Each timeline's steps, by its heading: ``=`` or ``≤``, and seconds after the fault."""
    client, patroni = _client(), _patroni()
    lease, sweep = code["OPERATION_LEASE"], code["OPERATION_SWEEP_INTERVAL"]
    # The lease lapses, the next sweep publishes the operation again, and
    # the next poll (one Retry-After of an operation that old) sees it end.
    republished = lease + sweep
    # The leader key lapses at most ttl after the kill; the standby takes it
    # at its next loop.
    promoted = patroni["ttl"] + patroni["loop_wait"]
    # A retry waits Retry-After plus a jitter of at most the policy's max_delay.
    retried = promoted + code["DATABASE_RETRY_AFTER_SECONDS"] + client["max_delay"]
    return {
        "A worker dies holding a payment, and the broker loses its message": [
            ("=", 0),
            ("≤", lease),
            ("≤", republished),
            ("≤", republished),
            ("≤", republished + polling.retry_after_seconds(republished)),
        ],
        "The primary fails over mid-payment": [
            ("=", 0),
            ("=", 0),
            ("≤", lease),
            ("≤", patroni["ttl"]),
            ("≤", promoted),
            ("≤", max(lease, promoted) + sweep),
            ("≤", retried),
        ],
        "How long a `409 IdempotencyKeyInProgress` can last": [
            ("=", 0),
            ("=", 0),
            ("=", code["IDEMPOTENCY_WAIT"]),
            ("=", code["IDEMPOTENCY_LOCK_TIMEOUT"]),
            ("=", _haproxy("server")),
        ],
    }


def derived(code: dict[str, Any]) -> list[str]:
    """Sentences whose figure is a sum of defaults, exactly as the page must write them."""
    return [
        f"pauses between a payment's attempts add up to {s(code['payment_pauses'])}",
        f"twice `IDEMPOTENCY_LOCK_TIMEOUT`, {s(2 * code['IDEMPOTENCY_LOCK_TIMEOUT'])}",
    ]


# --- Reading the page --------------------------------------------------------------

_ROW = re.compile(r"^\| (.+?) \| (.+?) \| (.+?) \| (.+?) \| (.+?) \|$", re.MULTILINE)
_NAMED = re.compile(r"`([^`\n]+)`\s+\((\d+(?:\.\d+)?(?: [sh]\b)?)")
_STEP = re.compile(r"^\d+\. \*\*t ([=≤]) (\d+(?:\.\d+)?) s\*\*", re.MULTILINE)


def table_rows() -> dict[str, list[str]]:
    section = PAGE.split("\n## The table\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for match in _ROW.finditer(section):
        cells = list(match.groups())
        if cells[0] in ("The wait", "---"):
            continue
        assert cells[0] not in rows, f"two rows of docs/WAITS.md are {cells[0]!r}"
        rows[cells[0]] = cells[1:]
    return rows


def sections() -> dict[str, str]:
    """Each timeline's text, by its heading, to the next heading."""
    parts = re.split(r"^### (.+)$", PAGE, flags=re.MULTILINE)
    headings, bodies = parts[1::2], parts[2::2]
    return {
        heading: body.split("\n## ", 1)[0] for heading, body in zip(headings, bodies, strict=True)
    }


# --- The checks -----------------------------------------------------------------


def test_every_row_of_the_table_gives_its_default_as_its_source_sets_it(
    code: dict[str, Any],
) -> None:
    expected = expected_table(code)
    rows = table_rows()

    assert sorted(rows) == sorted(expected), (
        "docs/WAITS.md's rows and this test's sources differ: give a new row its source here"
    )
    wrong = {
        wait: (cells[1], expected[wait])
        for wait, cells in rows.items()
        if cells[1] != expected[wait]
    }
    assert wrong == {}, "rows of docs/WAITS.md whose default (page, source) differ"


def test_every_file_the_table_names_exists() -> None:
    named_files = [
        path
        for cells in table_rows().values()
        for path in re.findall(r"`([\w./-]+\.(?:py|cfg|yml|template))`", cells[2])
    ]

    assert named_files
    assert [path for path in named_files if not (ROOT / path).is_file()] == []


def test_no_pgbouncer_configuration_is_shipped_so_none_is_quoted() -> None:
    # The table says the deployment sets PgBouncer's waits: were a file added
    # to deploy/, its values would belong in the table.
    assert [p for p in (ROOT / "deploy").rglob("*") if "pgbouncer" in p.name.lower()] == []


def test_every_value_given_after_a_name_is_that_names_value(code: dict[str, Any]) -> None:
    values = named(code)
    wrong, unknown = [], []
    for match in _NAMED.finditer(PAGE):
        name, value = match.groups()
        if name not in values:
            unknown.append(name)
        elif value != values[name]:
            wrong.append((name, value, values[name]))

    assert unknown == [], "names docs/WAITS.md gives a value for, with no source in this test"
    assert wrong == [], "(name, on the page, at its source)"


def test_each_timelines_steps_are_the_sums_of_the_defaults(code: dict[str, Any]) -> None:
    expected = timelines(code)
    found = sections()

    for heading, steps in expected.items():
        assert heading in found, f"docs/WAITS.md has no timeline {heading!r}"
        page = [(sign, float(t)) for sign, t in _STEP.findall(found[heading])]
        assert page == [(sign, float(t)) for sign, t in steps], heading


def test_the_sums_the_prose_states_are_the_defaults_sums(code: dict[str, Any]) -> None:
    missing = [sentence for sentence in derived(code) if sentence not in _flat(PAGE)]

    assert missing == []


def test_what_the_prose_says_of_one_bound_against_another_holds(code: dict[str, Any]) -> None:
    client, patroni = _client(), _patroni()
    worst_failover_retry = timelines(code)["The primary fails over mid-payment"][-1][1]

    # "It is below nginx's proxy_read_timeout, so the client gets this answer."
    assert _haproxy("server") < _nginx("proxy_read_timeout")
    # "(b)'s lease lapses" before the leader key does, in that order.
    assert code["OPERATION_LEASE"] <= patroni["ttl"]
    # "well within RetryPolicy.deadline".
    assert worst_failover_retry < client["deadline"]
    # A 409 "comes well within the client's timeout for one attempt".
    assert code["IDEMPOTENCY_WAIT"] < client["timeout"]
    # The 409's Retry-After is "IDEMPOTENCY_WAIT rounded up".
    assert code["in_progress_retry_after"] == max(1, math.ceil(code["IDEMPOTENCY_WAIT"]))
    # "at most twice IDEMPOTENCY_LOCK_TIMEOUT … That is as long as the client's deadline."
    assert 2 * code["IDEMPOTENCY_LOCK_TIMEOUT"] == client["deadline"]
    # A hung command is ended by the database before a proxy gives up on its client.
    assert code["IDEMPOTENCY_LOCK_TIMEOUT"] < _haproxy("server")


def test_no_number_on_the_page_escapes_these_checks(code: dict[str, Any]) -> None:
    text = PAGE
    for cells in table_rows().values():
        text = text.replace(f"| {cells[1]} |", "| |", 1)
    text = _flat(text)
    for sentence in derived(code):
        text = text.replace(sentence, "")
    text = _NAMED.sub(lambda match: f"`{match[1]}` (", text)
    text = re.sub(r"\*\*t [=≤] \d+(?:\.\d+)? s\*\*", "", text)
    text = re.sub(r"(?<![\w.])\d+\. ", "", text)  # a numbered step's own number
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", "", text)

    assert re.findall(r"[^\s]*\d[^\s]*", text) == [], (
        "a number on docs/WAITS.md that no check reads: quote it as `NAME` (value),"
        " or give it a source in this test"
    )


def _flat(text: str) -> str:
    """``text`` with its line breaks and indents as single spaces, as a sentence reads."""
    return re.sub(r"\s*\n\s*", " ", text)
