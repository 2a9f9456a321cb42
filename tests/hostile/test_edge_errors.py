"""What the edge refuses, it refuses in the contract's format.

Through nginx (deploy/nginx/): bodies over 1 MiB, long URLs, large headers,
malformed requests, an upstream that is down or does not answer, and
/metrics, each answered by nginx itself as problem+json, with the request's
trace id; the app's own answers pass through untouched. Against gunicorn
alone: what gunicorn refuses before the app sees it is problem+json too,
and never echoes the client's bytes.
"""

import json
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.edge import TEMPLATE, RawResponse, nginx, raw_exchange
from tests.support.http import ORDER, Api
from tests.support.live import ROOT, LiveService, free_port

MIB = 1024 * 1024
PROBLEM_MEMBERS = {"type", "title", "status", "error", "message", "traceId"}
RETRY_ADVICE = "retry it with the same Idempotency-Key"


def assert_problem(
    response: requests.Response | RawResponse,
    status: int,
    code: str,
    *,
    trace_id: str | None = None,
) -> dict[str, Any]:
    """The answer is the contract's problem+json for ``status``, with a consistent trace id."""
    received: Mapping[str, str]
    if isinstance(response, RawResponse):
        status_code, received, body = response.status, response.headers, response.body
    else:
        status_code, received, body = response.status_code, response.headers, response.content
    headers = {name.lower(): value for name, value in received.items()}
    assert status_code == status, body
    assert headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = json.loads(body)
    assert set(problem) == PROBLEM_MEMBERS
    assert problem["type"] == f"urn:order-service:problem:{code}"
    assert problem["status"] == status
    assert problem["error"] == code
    assert problem["title"]
    assert problem["message"]
    # One X-Request-ID (a repeated header would read "a, a"), equal to traceId.
    assert headers["x-request-id"] == problem["traceId"]
    if trace_id is None:
        assert re.fullmatch(r"[0-9a-f]{32}", problem["traceId"])
    else:
        assert problem["traceId"] == trace_id
    return problem


def raw_get(target: str, extra_headers: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra_headers}\r\n".encode()


@pytest.fixture(scope="module")
def edge(stack: tuple[LiveService, LiveService]) -> LiveService:
    return stack[0]


@pytest.fixture(scope="module")
def gunicorn_alone(stack: tuple[LiveService, LiveService]) -> LiveService:
    return stack[1]


# --- nginx's own refusals -------------------------------------------------


def _two_mib_in_chunks() -> Iterator[bytes]:
    for _ in range(32):
        yield b"x" * (64 * 1024)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_over_1_mib_is_413_at_the_edge(edge: LiveService, framing: str) -> None:
    body = b"x" * (2 * MIB) if framing == "content-length" else _two_mib_in_chunks()

    response = requests.post(
        edge.url("/v1/orders"),
        data=body,
        headers={"Content-Type": "application/json", "X-Request-ID": f"edge-413-{framing}"},
        timeout=10,
    )

    problem = assert_problem(response, 413, "PayloadTooLarge", trace_id=f"edge-413-{framing}")
    assert problem["message"] == "Request bodies are limited to 1 MiB."
    assert "Retry-After" not in response.headers


@pytest.mark.django_db(transaction=True)
def test_a_command_of_exactly_1_mib_passes_the_edge(edge: LiveService, api: Api) -> None:
    body = json.dumps(ORDER).encode()
    body += b" " * (MIB - len(body))

    response = requests.post(
        edge.url("/v1/orders"),
        data=body,
        headers={
            "Authorization": f"Bearer {api.token}",
            "Idempotency-Key": uuid.uuid4().hex,
            "Content-Type": "application/json",
        },
        timeout=10,
    )

    assert len(body) == MIB
    assert response.status_code == 201, response.text


def test_a_10_kb_url_is_414(edge: LiveService) -> None:
    response = requests.get(edge.url("/v1/orders?q=" + "a" * 10_000), timeout=10)

    assert_problem(response, 414, "UriTooLong")


def test_a_20_kb_header_is_431(edge: LiveService) -> None:
    response = requests.get(
        edge.url("/healthz"),
        headers={"X-Request-ID": "edge-431", "X-Padding": "a" * 20_000},
        timeout=10,
    )

    assert_problem(response, 431, "RequestHeaderFieldsTooLarge", trace_id="edge-431")


def _headers(count: int, size: int, name: str = "X-Padding-{}: ") -> str:
    return "".join(name.format(i) + "a" * size + "\r\n" for i in range(count))


# nginx holds the request line and the headers in at most 4 buffers of 8 kB
# (large_client_header_buffers): one line over 8 kB, or more lines than the
# buffers hold, is too large. Both are nginx's 494, answered as 431.
@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/healthz", _headers(1, 9_000)),
        ("/healthz", _headers(5, 7_000)),
        ("/healthz", _headers(40, 1_000)),
        ("/healthz", "Cookie: a=" + "a" * 9_000 + "\r\n"),
        ("/healthz", _headers(5, 7_000, "Cookie: a{}=")),
        ("/healthz?q=" + "a" * 7_000, _headers(5, 7_000)),
    ],
    ids=["one-9k", "five-7k", "forty-1k", "one-9k-cookie", "five-7k-cookies", "7k-url-and-35k"],
)
def test_headers_over_the_edges_limits_are_431(
    edge: LiveService, target: str, headers: str
) -> None:
    request = raw_get(target, "X-Request-ID: edge-431\r\n" + headers)

    response = raw_exchange(edge, request)

    assert_problem(response, 431, "RequestHeaderFieldsTooLarge", trace_id="edge-431")
    assert response.headers["connection"] == "close"


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GET /he<llo> HTTP/1.1 extra\r\n\r\n", 400, "BadRequest"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "BadRequest"),
        (raw_get("/healthz", "Content-Length: -1\r\n"), 400, "BadRequest"),
        (raw_get("/healthz", "Transfer-Encoding: gzip\r\n"), 501, "NotImplemented"),
        (b"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505, "HttpVersionNotSupported"),
        (b"TRACE / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405, "MethodNotAllowed"),
    ],
    ids=["request-line", "tls-handshake", "content-length", "transfer-coding", "http2", "trace"],
)
def test_a_malformed_request_is_refused_as_problem_json(
    edge: LiveService, request_bytes: bytes, status: int, code: str
) -> None:
    response = raw_exchange(edge, request_bytes)

    assert_problem(response, status, code)
    assert b"<" not in response.body


@pytest.mark.parametrize("path", ["/metrics", "/%6Detrics", "//metrics", "/metrics?name=x"])
def test_metrics_are_fenced_at_the_edge(
    edge: LiveService, gunicorn_alone: LiveService, path: str
) -> None:
    response = requests.get(edge.url(path), headers={"X-Request-ID": "edge-metrics"}, timeout=10)

    assert_problem(response, 404, "NotFound", trace_id="edge-metrics")
    # Only the edge: gunicorn still serves Prometheus on the internal network.
    assert requests.get(gunicorn_alone.url("/metrics"), timeout=10).status_code == 200


@pytest.mark.parametrize(
    "request_id",
    ['x"},"status":200,"a":"', "a" * 129, "two words", "caf\u00e9", ""],
    ids=["json-injection", "too-long", "space", "non-ascii", "empty"],
)
def test_an_insane_request_id_is_replaced(edge: LiveService, request_id: str) -> None:
    header = f"X-Request-ID: {request_id}\r\n".encode()
    request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n"

    response = raw_exchange(edge, request)

    assert_problem(response, 404, "NotFound")


def test_the_apps_own_problems_pass_through_untouched(
    edge: LiveService, gunicorn_alone: LiveService
) -> None:
    through_edge = requests.get(
        edge.url("/v1/orders"), headers={"X-Request-ID": "edge-401"}, timeout=10
    )
    direct = requests.get(
        gunicorn_alone.url("/v1/orders"), headers={"X-Request-ID": "edge-401"}, timeout=10
    )

    problem = assert_problem(through_edge, 401, "NotAuthenticated", trace_id="edge-401")
    assert through_edge.content == direct.content
    assert problem["message"] == direct.json()["message"]
    assert "Retry-After" not in through_edge.headers


def test_gunicorns_own_refusals_pass_through_the_edge(edge: LiveService) -> None:
    # 5 kB: within nginx's 8 kB request line, over gunicorn's 4094 bytes.
    response = raw_exchange(edge, raw_get("/healthz?q=" + "a" * 5_000))

    assert_problem(response, 414, "UriTooLong")


# --- an upstream that fails ------------------------------------------------


@pytest.fixture
def upstream_down(tmp_path: Path) -> Iterator[LiveService]:
    """nginx in front of a port nothing listens on."""
    with nginx(f"127.0.0.1:{free_port()}", tmp_path) as edge:
        yield edge


@pytest.fixture
def upstream_not_accepting(tmp_path: Path) -> Iterator[LiveService]:
    """nginx in front of a listener whose accept queue is full.

    The kernel drops nginx's connection attempts (SYNs) to it, so nginx
    gives up after proxy_connect_timeout, as it would in front of a
    gunicorn too busy to accept: the one 504 that needs no long wait.
    """
    with socket.socket() as listener, ExitStack() as fillers:
        listener.bind(("127.0.0.1", 0))
        # A backlog of 0 holds one connection, which is never accepted.
        listener.listen(0)
        fillers.enter_context(socket.create_connection(listener.getsockname(), timeout=5))
        # One more, not waited for, in case a kernel holds one more.
        extra = fillers.enter_context(socket.socket())
        extra.setblocking(False)
        extra.connect_ex(listener.getsockname())
        host, port = listener.getsockname()
        with nginx(f"{host}:{port}", tmp_path) as edge:
            yield edge


def test_an_upstream_that_is_down_is_502_with_retry_advice(upstream_down: LiveService) -> None:
    response = requests.post(
        upstream_down.url("/v1/orders"),
        json=ORDER,
        headers={"Idempotency-Key": "edge-502", "X-Request-ID": "edge-502"},
        timeout=10,
    )

    problem = assert_problem(response, 502, "BadGateway", trace_id="edge-502")
    assert RETRY_ADVICE in problem["message"]
    assert "may or may not have been executed" in problem["message"]
    assert response.headers["Retry-After"] == "1"


def test_an_upstream_that_does_not_answer_in_time_is_504_with_retry_advice(
    upstream_not_accepting: LiveService,
) -> None:
    response = requests.post(
        upstream_not_accepting.url("/v1/orders"),
        json=ORDER,
        headers={"Idempotency-Key": "edge-504"},
        timeout=30,
    )

    problem = assert_problem(response, 504, "GatewayTimeout")
    assert RETRY_ADVICE in problem["message"]
    assert response.headers["Retry-After"] == "1"


def _directives(text: str) -> dict[str, list[str]]:
    """Each directive's values, in order, from an nginx config (comments dropped)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        statement = line.split("#", 1)[0].strip()
        if statement.endswith(";"):
            name, _, value = statement[:-1].partition(" ")
            found.setdefault(name, []).append(value.strip())
    return found


def test_the_config_waits_for_the_app_and_answers_what_it_cannot_provoke_cheaply() -> None:
    directives = _directives(TEMPLATE.read_text())
    gunicorn_timeout = re.search(
        r'"WEB_TIMEOUT", "(\d+)"', (ROOT / "config/gunicorn.py").read_text()
    )

    # A command the app is still working on is answered by the app, not cut off.
    assert gunicorn_timeout
    [read_timeout] = directives["proxy_read_timeout"]
    assert int(read_timeout.removesuffix("s")) > int(gunicorn_timeout.group(1))
    assert directives["proxy_intercept_errors"] == ["off"]
    assert directives["proxy_request_buffering"] == ["on"]
    assert directives["server_tokens"] == ["off"]
    # 503 (no upstream left) and 504 after a read timeout share the page above.
    handled = {code for value in directives["error_page"] for code in value.split()[:-1]}
    assert {"400", "413", "414", "494", "502", "503", "504"} <= handled


# --- gunicorn alone ----------------------------------------------------------

HOSTILE = "HOSTILE-7f2c"


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (f"GET /{HOSTILE}<x> HTTP/1.1 {HOSTILE}\r\n\r\n".encode(), 400, "BadRequest"),
        (raw_get(f"/{HOSTILE}?q=" + "a" * 5_000), 414, "UriTooLong"),
        (
            raw_get("/healthz", f"X-{HOSTILE}: " + "a" * 9_000 + "\r\n"),
            431,
            "RequestHeaderFieldsTooLarge",
        ),
        (raw_get("/healthz", f"Transfer-Encoding: {HOSTILE}\r\n"), 501, "NotImplemented"),
    ],
    ids=["request-line", "long-request-line", "large-header", "transfer-coding"],
)
def test_gunicorns_own_refusals_are_problem_json_without_an_echo(
    gunicorn_alone: LiveService, request_bytes: bytes, status: int, code: str
) -> None:
    response = raw_exchange(gunicorn_alone, request_bytes)

    assert_problem(response, status, code)
    assert response.headers["connection"] == "close"
    assert HOSTILE.encode() not in response.body
    assert b"<" not in response.body


def test_the_worker_module_loads_without_django(tmp_path: Path) -> None:
    # gunicorn's arbiter loads config/gunicorn.py, and so the worker class,
    # before it forks: Django's settings must not be loaded there.
    # It loads the class as gunicorn does, by the dotted path the settings name.
    check = (
        "import runpy, sys;"
        "from gunicorn.util import load_class;"
        "settings = runpy.run_path('config/gunicorn.py');"
        "worker = load_class(settings['worker_class']);"
        "from gunicorn.workers.gthread import ThreadWorker;"
        "assert issubclass(worker, ThreadWorker);"
        "assert not [name for name in sys.modules if name.split('.')[0] == 'django'], 'django'"
    )
    env: Mapping[str, str] = {"PATH": "/usr/bin:/bin", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    result = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert result.returncode == 0, result.stderr
