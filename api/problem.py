"""The shape of every error body: RFC 9457 problem details plus the service's members.

Plain Python, free of Django: gunicorn's worker (api.gunicorn_worker)
answers in this shape from its arbiter-loaded process before Django is set
up, and api.errors renders every other error with it.
"""

import json
from collections.abc import Mapping
from typing import Any

PROBLEM_CONTENT_TYPE = "application/problem+json"


def problem_body(
    *,
    status: int,
    code: str,
    title: str,
    message: str,
    trace_id: str,
    details: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    """The JSON body of one problem: ``type``, ``title``, ``status``, ``error``, ``message``,
    ``traceId``, then ``details`` when there are any and ``extra`` members."""
    body: dict[str, Any] = {
        "type": f"urn:order-service:problem:{code}",
        "title": title,
        "status": status,
        "error": code,
        "message": message,
        "traceId": trace_id,
    }
    if details:
        body["details"] = details
    body.update(extra or {})
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
