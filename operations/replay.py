"""Replays of asynchronous commands report the operation's current status."""

import json

import structlog
from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

from idempotency.models import IdempotencyKey
from operations.models import Operation
from operations.polling import retry_after_of


def with_current_status(record: IdempotencyKey, response: HttpResponse) -> HttpResponse:
    """Replace ``status`` in a stored 202 answer by its operation's status now.

    The one exception to byte-identical replays (docs/SPECIFICATION.md §4 rule 6): the
    ids and links stay as stored, and a retrying client sees progress.
    Retry-After is answered only while the operation is processing, and is
    then the operation's current one (operations.polling), not the stored
    one: it grows with the operation's age.
    """
    if record.answer.status != 202:
        return response
    body = json.loads(response.content)
    structlog.contextvars.bind_contextvars(operation_id=body["operationId"])
    current = (
        Operation.objects.filter(pk=body["operationId"], tenant_id=record.tenant_id)
        .values_list("status", "created_at")
        .first()
    )
    if current is None:
        return response
    status, created_at = current
    body["status"] = status
    # Rendered as the original was, so only the status can differ.
    response.content = JSONRenderer().render(body)
    if status == Operation.Status.PROCESSING:
        response["Retry-After"] = retry_after_of(created_at)
    elif response.has_header("Retry-After"):
        del response["Retry-After"]
    return response
