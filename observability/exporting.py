"""Whether this process exports spans: OpenTelemetry, set up only when an endpoint is set.

Apart from observability.tracing, which observability.otel routes spans
through, so that neither imports the other's module back; and apart from
observability.otel, so that a process with no endpoint never imports
OpenTelemetry's SDK and instrumentations.
"""

import os

# OpenTelemetry's own variables, read as its SDK reads them: the SDK itself
# takes the endpoint, headers, service name and the rest from them.
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def export_if_configured(*, django: bool) -> bool:
    """Export this process's spans over OTLP/HTTP if an endpoint is set; whether it does.

    Called once per process that serves, after any fork: the exporter's
    thread and connections would not survive one. ``django``: instrument
    the request handling too (web processes; a worker serves no request).
    """
    if not any(os.environ.get(name) for name in _ENDPOINT_VARIABLES):
        return False
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    # Here, not at the top: the import is what an unset endpoint saves.
    from observability.otel import configure

    configure(django=django)
    return True
