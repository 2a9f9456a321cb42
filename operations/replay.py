"""Replays of asynchronous commands report the operation's current status."""

import json

import structlog
from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

from idempotency.models import IdempotencyKey
from operations.models import Operation


def with_current_status(record: IdempotencyKey, response: HttpResponse) -> HttpResponse:
    """Replace ``status`` in a stored 202 answer by its operation's status now.

    The one exception to byte-identical replays (docs/SPECIFICATION.md §4 rule 6): the
    ids and links stay as stored, and a retrying client sees progress.
    Retry-After is kept only while the operation is processing.
    """
    if record.answer.status != 202:
        return response
    body = json.loads(response.content)
    structlog.contextvars.bind_contextvars(operation_id=body["operationId"])
    status = (
        Operation.objects.filter(pk=body["operationId"], tenant_id=record.tenant_id)
        .values_list("status", flat=True)
        .first()
    )
    if status is None:
        return response
    body["status"] = status
    # Rendered as the original was, so only the status can differ.
    response.content = JSONRenderer().render(body)
    if status != Operation.Status.PROCESSING and response.has_header("Retry-After"):
        del response["Retry-After"]
    return response
