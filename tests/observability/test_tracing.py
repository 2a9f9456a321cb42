"""W3C Trace Context: a request joins its caller's trace, which goes on into its task.

And the optional OpenTelemetry export: the spans of a payment, from the
request to the provider call, all in that trace; nothing of OpenTelemetry
loaded when it is off.
"""

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Task
from celery.signals import before_task_publish, task_prerun
from django.db import connections
from hypothesis import example, given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, format_span_id, format_trace_id
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pytest_django import Settings

from observability.logging import json_formatter
from observability.tracing import current_trace_id, parse_traceparent
from operations.models import Operation
from operations.outbox import publish
from operations.registry import default_queue
from provider.gateway import ProviderResult
from provider.simulator import SimulatedProvider
from tests.support.concurrency import FinishedOperation
from tests.support.http import Api, body_of, payment_body, problem
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
MISSING_ORDER = "/v1/orders/ord_missing"
ROOT = Path(__file__).resolve().parents[2]


def json_lines(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    formatter = json_formatter()
    lines = [json.loads(formatter.format(record)) for record in caplog.records]
    return [line for line in lines if line.get("event") == event]


def is_fresh_trace_id(value: str) -> bool:
    return parse_traceparent(f"00-{value}-{PARENT_ID}-01") is not None and value != TRACE_ID


# --- the traceparent of a request ------------------------------------------------


def test_a_valid_traceparent_is_the_trace_of_errors_logs_and_the_request_id(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    response = api.get(MISSING_ORDER, traceparent=TRACEPARENT)

    assert response.status_code == 404
    assert problem(response)["traceId"] == TRACE_ID
    assert response["X-Request-ID"] == TRACE_ID
    assert [line["trace_id"] for line in json_lines(caplog, "request")] == [TRACE_ID]


def test_a_sane_request_id_is_echoed_beside_the_callers_trace(api: Api) -> None:
    response = api.get(MISSING_ORDER, traceparent=TRACEPARENT, **{"X-Request-ID": "req-1"})

    assert response["X-Request-ID"] == "req-1"
    assert problem(response)["traceId"] == TRACE_ID


def test_a_later_version_is_read_by_its_first_four_fields(api: Api) -> None:
    response = api.get(MISSING_ORDER, traceparent=f"cc-{TRACE_ID}-{PARENT_ID}-09-what-cc-adds")

    assert problem(response)["traceId"] == TRACE_ID


@pytest.mark.parametrize(
    "traceparent",
    [
        pytest.param(f"ff-{TRACE_ID}-{PARENT_ID}-01", id="version-ff"),
        pytest.param(f"00-{'0' * 32}-{PARENT_ID}-01", id="zero-trace-id"),
        pytest.param(f"00-{TRACE_ID}-{'0' * 16}-01", id="zero-parent-id"),
        pytest.param(f"00-{TRACE_ID.upper()}-{PARENT_ID}-01", id="uppercase-trace-id"),
        pytest.param(f"00-{TRACE_ID}-{PARENT_ID.upper()}-01", id="uppercase-parent-id"),
        pytest.param(f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01", id="short-trace-id"),
        pytest.param(f"00-{TRACE_ID}0-{PARENT_ID}-01", id="long-trace-id"),
        pytest.param(f"00-{TRACE_ID}-{PARENT_ID[:-1]}-01", id="short-parent-id"),
        pytest.param(f"00-{TRACE_ID}-{PARENT_ID}-1", id="short-flags"),
        pytest.param(f"0-{TRACE_ID}-{PARENT_ID}-01", id="short-version"),
        pytest.param(f"00-{TRACE_ID}-{PARENT_ID}-01-extra", id="version-00-with-more"),
        pytest.param(f"cc-{TRACE_ID}-{PARENT_ID}-01x", id="later-version-no-dash"),
        pytest.param(f"00_{TRACE_ID}_{PARENT_ID}_01", id="underscores"),
        pytest.param(f"00-{TRACE_ID[:-1]}g-{PARENT_ID}-01", id="not-hex"),
        pytest.param("garbage", id="garbage"),
        pytest.param("", id="empty"),
    ],
)
def test_an_invalid_traceparent_is_ignored(api: Api, traceparent: str) -> None:
    response = api.get(MISSING_ORDER, traceparent=traceparent)

    trace_id = problem(response)["traceId"]
    assert is_fresh_trace_id(trace_id)
    assert response["X-Request-ID"] == trace_id


# --- the parser, held to OpenTelemetry's propagator --------------------------------

_REFERENCE = TraceContextTextMapPropagator()


def _read_by_the_reference(header: str) -> tuple[str, str, str] | None:
    extracted = _REFERENCE.extract({"traceparent": header})
    context = trace.get_current_span(extracted).get_span_context()
    if not context.is_valid:
        return None
    flags = f"{context.trace_flags:02x}"
    return format_trace_id(context.trace_id), format_span_id(context.span_id), flags


def _field(valid: str) -> st.SearchStrategy[str]:
    """Any lowercase hex of the field's length, or a near miss of ``valid``."""
    near = [valid, valid.upper(), "0" * len(valid), valid[:-1], valid + "0", valid[:-1] + "g"]
    return st.text("0123456789abcdef", min_size=len(valid), max_size=len(valid)) | st.sampled_from(
        near
    )


@given(
    version=st.sampled_from(["00", "01", "cc", "fe", "ff", "0", "000"]) | _field("00"),
    trace_id=_field(TRACE_ID),
    parent_id=_field(PARENT_ID),
    flags=_field("01"),
    rest=st.sampled_from(["", "-", "-what-cc-adds", "x", "-01"]),
    padding=st.sampled_from(["", " ", "\t", " \t"]),
)
@example(version="00", trace_id=TRACE_ID, parent_id=PARENT_ID, flags="01", rest="", padding="")
def test_the_parser_reads_every_traceparent_as_opentelemetrys_propagator_does(
    version: str, trace_id: str, parent_id: str, flags: str, rest: str, padding: str
) -> None:
    # observability.tracing keeps its own parser (why: its docstring); this
    # holds it to the reference, header by header. A header's value never
    # holds a line break, where the two differ (the reference's `$` matches
    # before a final one).
    header = f"{padding}{version}-{trace_id}-{parent_id}-{flags}{rest}{padding}"
    ours = parse_traceparent(header)

    assert (tuple(ours) if ours is not None else None) == _read_by_the_reference(header)


def test_a_request_with_neither_gets_a_fresh_w3c_trace_id(api: Api) -> None:
    first, second = api.get(MISSING_ORDER), api.get(MISSING_ORDER)

    assert is_fresh_trace_id(problem(first)["traceId"])
    assert problem(first)["traceId"] == first["X-Request-ID"]
    assert problem(first)["traceId"] != problem(second)["traceId"]


# --- into the asynchronous work ----------------------------------------------------


class TracedProvider(SimulatedProvider):
    """The simulator, noting the trace each charge is made in."""

    traces: list[str] = []

    def charge(self, **kwargs: Any) -> ProviderResult:
        self.traces.append(current_trace_id())
        return super().charge(**kwargs)


@pytest.fixture
def message_traceparents() -> Iterator[list[str]]:
    """The ``traceparent`` header of each task message the worker runs."""
    seen: list[str] = []

    def note(task: Task, **kwargs: Any) -> None:
        seen.append(getattr(task.request, "traceparent", None) or "")

    task_prerun.connect(note, weak=False)
    yield seen
    task_prerun.disconnect(note)


def pay(api: Api, order_body: dict[str, Any], **headers: str) -> str:
    """Place an order and pay it: the payment's operation id."""
    order = body_of(api.post("/v1/orders", order_body, key="order"))["order"]
    accepted = api.post("/v1/payments", payment_body(order), key="payment", **headers)
    assert accepted.status_code == 202
    return str(body_of(accepted)["operationId"])


def test_a_payment_goes_on_in_the_callers_trace(
    api: Api,
    order_body: dict[str, Any],
    worker: None,
    finished_operation: FinishedOperation,
    message_traceparents: list[str],
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.PAYMENT_GATEWAY = f"{__name__}.TracedProvider"
    TracedProvider.traces.clear()
    caplog.set_level(logging.INFO)

    operation_id = pay(api, order_body, traceparent=TRACEPARENT)
    operation = finished_operation(operation_id)

    assert operation.status == Operation.Status.SUCCEEDED
    assert operation.trace_id == TRACE_ID
    (sent,) = message_traceparents
    assert parse_traceparent(sent) is not None
    assert parse_traceparent(sent).trace_id == TRACE_ID  # type: ignore[union-attr]
    assert [line["trace_id"] for line in json_lines(caplog, "task")] == [TRACE_ID]
    assert TracedProvider.traces == [TRACE_ID]


def test_a_trace_that_is_a_clients_request_id_goes_on_without_a_traceparent(
    api: Api,
    order_body: dict[str, Any],
    worker: None,
    finished_operation: FinishedOperation,
    message_traceparents: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)

    operation = finished_operation(pay(api, order_body, **{"X-Request-ID": "req-pay"}))

    assert operation.trace_id == "req-pay"
    # Not a W3C trace id, so no traceparent can carry it.
    assert message_traceparents == [""]
    assert [line["trace_id"] for line in json_lines(caplog, "task")] == ["req-pay"]


# --- OpenTelemetry --------------------------------------------------------------


@pytest.fixture
def exported_spans() -> Iterator[InMemorySpanExporter]:
    """OpenTelemetry on in this process, as observability.otel sets it up, exporting to memory.

    Set up before the worker (ask for it first) so that every database
    connection is opened traced; connections are closed on both sides so
    that no traced one outlives the test.
    """
    from observability import otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.install(provider, django=True)
    connections.close_all()
    try:
        yield exporter
    finally:
        otel.uninstall()
        connections.close_all()


def scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else ""


def test_with_opentelemetry_every_span_of_a_payment_is_in_the_callers_trace(
    exported_spans: InMemorySpanExporter,
    api: Api,
    order_body: dict[str, Any],
    worker: None,
    finished_operation: FinishedOperation,
) -> None:
    operation = finished_operation(pay(api, order_body, traceparent=TRACEPARENT))
    task_span = "run/operations.tasks.run_operation"
    # The task's span ends in the task's postrun, which may come after the
    # operation's end is visible.
    wait_for(
        lambda: [s.name for s in exported_spans.get_finished_spans()],
        lambda names: task_span in names,
        10,
        what=f"the span {task_span} exported",
    )

    spans = [
        s
        for s in exported_spans.get_finished_spans()
        if s.context is not None and format_trace_id(s.context.trace_id) == TRACE_ID
    ]
    names = {s.name for s in spans}
    assert operation.trace_id == TRACE_ID
    (request,) = [s for s in spans if s.kind == SpanKind.SERVER]
    assert request.parent is not None
    assert format_span_id(request.parent.span_id) == PARENT_ID
    assert request.attributes is not None
    assert request.attributes.get("http.route") == "v1/payments"
    assert {"idempotency.claim", "idempotency.store", "provider.charge", task_span} <= names
    assert "apply_async/operations.tasks.run_operation" in names
    database = [s for s in spans if scope(s) == "opentelemetry.instrumentation.psycopg"]
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def ancestors(span: ReadableSpan) -> set[str]:
        found = set()
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            found.add(span.name)
        return found

    # Queries under the request's span and under the task's.
    assert any(request.name in ancestors(s) and task_span not in ancestors(s) for s in database)
    assert any(task_span in ancestors(s) for s in database)
    (charge,) = [s for s in spans if s.name == "provider.charge"]
    assert task_span in ancestors(charge)
    assert charge.attributes is not None
    assert charge.attributes.get("payment.id") == operation.result_id


def test_with_opentelemetry_the_trace_id_is_the_request_spans(
    exported_spans: InMemorySpanExporter, api: Api
) -> None:
    joined = api.get(MISSING_ORDER, traceparent=TRACEPARENT)
    fresh = api.get(MISSING_ORDER)

    servers = [s for s in exported_spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert [format_trace_id(s.context.trace_id) for s in servers if s.context] == [
        problem(joined)["traceId"],
        problem(fresh)["traceId"],
    ]
    assert problem(joined)["traceId"] == TRACE_ID
    assert fresh["X-Request-ID"] == problem(fresh)["traceId"]


def test_with_opentelemetry_a_republished_operation_stays_in_its_trace(
    exported_spans: InMemorySpanExporter, broker: None
) -> None:
    from config.celery import app

    sent: list[dict[str, Any]] = []

    def note(headers: dict[str, Any], **kwargs: Any) -> None:
        sent.append(dict(headers))

    before_task_publish.connect(note, weak=False)
    try:
        # As the sweep does: outside any request, with the trace id of its row.
        assert publish("op_republished", TRACE_ID, queue=default_queue())
    finally:
        before_task_publish.disconnect(note)
        app.control.purge()

    (producer,) = exported_spans.get_finished_spans()
    assert producer.kind == SpanKind.PRODUCER
    assert producer.context is not None
    assert format_trace_id(producer.context.trace_id) == TRACE_ID
    (headers,) = sent
    assert headers["trace_id"] == TRACE_ID
    assert headers["traceparent"] == (
        f"00-{TRACE_ID}-{format_span_id(producer.context.span_id)}-01"
    )


# --- off unless configured ------------------------------------------------------

_LOAD_THE_SERVICE = """
import sys
import config.wsgi, config.celery
from django.test import Client
from observability import tracing
Client().get("/v1/orders/ord_missing", headers={"traceparent": sys.argv[1]})
with tracing.span("a span"):
    pass
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
print(json.dumps({"loaded": loaded, "exporting": tracing._backend is not None}))
"""


def load_the_service(**variables: str) -> dict[str, Any]:
    """Load the web application and the Celery app in a new process, serve one request."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", f"import json\n{_LOAD_THE_SERVICE}", TRACEPARENT],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings", **variables},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported() -> None:
    assert load_the_service() == {"loaded": [], "exporting": False}


def test_with_an_endpoint_the_web_process_exports() -> None:
    # Nothing listens there; the one-second timeout keeps the process's
    # exit, which sends the spans, short.
    loaded = load_the_service(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_EXPORTER_OTLP_TIMEOUT="1"
    )

    assert loaded["exporting"] is True
    assert "opentelemetry.instrumentation.django" in loaded["loaded"]


def test_the_sdk_can_be_switched_off_by_its_own_variable() -> None:
    loaded = load_the_service(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_SDK_DISABLED="true"
    )

    assert loaded == {"loaded": [], "exporting": False}
