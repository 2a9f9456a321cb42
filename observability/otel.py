"""OpenTelemetry: spans of requests, tasks, queries and provider calls, exported over OTLP/HTTP.

Imported only when an OTLP endpoint is set (observability.exporting.
export_if_configured); the SDK reads everything else from its own
variables (``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_TRACES_SAMPLER``,
``OTEL_PYTHON_DJANGO_EXCLUDED_URLS``...). The instrumentations continue the
caller's ``traceparent`` in the request's span and carry the trace through
the task's message headers into the worker's, so every span of a payment
shares the ``traceId`` of its errors and logs.
"""

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from observability import tracing

DEFAULT_SERVICE_NAME = "order-service"


def configure(*, django: bool) -> None:
    """Export this process's spans in batches to the configured OTLP/HTTP endpoint."""
    provider = TracerProvider(resource=_resource())
    # Batches, sent by a thread of the processor's: a request never waits on
    # the collector. The thread is this process's, hence setting up after fork.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    install(provider, django=django)


def install(provider: TracerProvider, *, django: bool) -> None:
    """Instrument psycopg, Celery (and Django) and route ``tracing.span`` to ``provider``.

    Before the first database connection and, for Django, before the
    handler loads its middleware: the instrumentations wrap connections
    and insert their middleware first in ``MIDDLEWARE``.
    """
    if django:
        DjangoInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider)
    CeleryInstrumentor().instrument(tracer_provider=provider)
    tracing.use_backend(_Backend(provider))


def uninstall() -> None:
    """Undo :func:`install` (tests); connections opened meanwhile stay traced until closed."""
    tracing.use_backend(None)
    for instrumentor in (CeleryInstrumentor(), PsycopgInstrumentor(), DjangoInstrumentor()):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


def _resource() -> Resource:
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, but
    # the attributes given to it win over both: ours is only the default.
    named = os.environ.get("OTEL_SERVICE_NAME") or any(
        pair.split("=", 1)[0].strip() == SERVICE_NAME
        for pair in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")
    )
    return Resource.create({} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME})


class _Backend:
    """observability.tracing's spans, as OpenTelemetry spans of ``provider``."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("order_service")
        self._ids = RandomIdGenerator()

    @contextmanager
    def span(self, name: str, attributes: dict[str, str | int] | None) -> Iterator[None]:
        with self._tracer.start_as_current_span(name, attributes=attributes):
            yield

    def trace_id(self) -> str:
        current = trace.get_current_span().get_span_context()
        return trace.format_trace_id(current.trace_id) if current.is_valid else ""

    def continued(self, trace_id: str) -> AbstractContextManager[None]:
        return self._continued(trace_id)

    @contextmanager
    def _continued(self, trace_id: str) -> Iterator[None]:
        if self.trace_id() == trace_id:
            yield
            return
        # A remote parent that stands for the operation's first request: the
        # sweep republishes outside it, and its message joins that trace.
        parent = trace.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=self._ids.generate_span_id(),
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(parent)))
        try:
            yield
        finally:
            context.detach(token)

    def flush(self) -> None:
        self._provider.force_flush()
