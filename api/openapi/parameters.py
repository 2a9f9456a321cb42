"""The parameters and response headers endpoints share, and the refusals that go with them.

``X-Request-ID``, ``Location``, ``Retry-After``, ``WWW-Authenticate``, the
conditional headers (``ETag``, ``If-None-Match``, ``If-Match`` and its
``412``), path ids, and a list's cursor, page size and envelope.
"""

from collections.abc import Callable, Sequence
from typing import Any

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
)
from rest_framework import serializers

from api.conditional import PreconditionFailed
from api.openapi.problems import FIELD_ERRORS, Refusal
from api.pagination import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MIN_PAGE_SIZE,
    InvalidListQuery,
)

REQUEST_ID = OpenApiParameter(
    "X-Request-ID",
    location=OpenApiParameter.HEADER,
    response=True,
    required=True,
    type=str,
    description=(
        "The request's id: the client's own `X-Request-ID` when it is 1-128 characters "
        "of `A-Za-z0-9._:@-`, a generated one otherwise. It is the `traceId` of errors "
        "and logs."
    ),
)


def location_header(status: int, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        "Location",
        location=OpenApiParameter.HEADER,
        response=[status],
        required=True,
        type=str,
        description=f"Path-absolute URL of {what}.",
    )


def retry_after_header(statuses: Sequence[int]) -> OpenApiParameter:
    return OpenApiParameter(
        "Retry-After",
        location=OpenApiParameter.HEADER,
        response=list(statuses),
        type=int,
        description=(
            "Seconds to wait before asking again: while an operation is processing (202 "
            "and the operation; it grows with the operation's age, see `getOperation`), for "
            "`IdempotencyKeyInProgress` (409), `Throttled` (429) and `ServiceUnavailable` "
            "(503)."
        ),
    )


WWW_AUTHENTICATE = OpenApiParameter(
    "WWW-Authenticate",
    location=OpenApiParameter.HEADER,
    response=[401],
    required=True,
    type=str,
    description='`Bearer realm="order-service"`.',
)


ETAG = OpenApiParameter(
    "ETag",
    location=OpenApiParameter.HEADER,
    response=[200, 304],
    required=True,
    type=str,
    description=(
        "A strong entity tag: 128 bits of the SHA-256 of the body, quoted. It changes "
        "whenever the representation does. Send it back in `If-None-Match` to poll "
        "cheaply, or in `If-Match` to change the resource only as you read it."
    ),
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    location=OpenApiParameter.HEADER,
    type=str,
    description=(
        'One or more ETags (`"…"`, `W/"…"`, comma-separated) or `*`. If one matches the '
        "current representation (weak comparison), the answer is `304 Not Modified`, with "
        "the `ETag` and no body."
    ),
)
NOT_MODIFIED = OpenApiResponse(
    None, "Not modified: `If-None-Match` holds the current ETag. No body; the `ETag` repeats."
)


def if_match_parameter(when: str) -> OpenApiParameter:
    """``If-Match`` of a command that changes an existing resource; ``when`` says where it acts."""
    return OpenApiParameter(
        "If-Match",
        location=OpenApiParameter.HEADER,
        type=str,
        description=(
            "Optional. The ETag of the resource as you last read it (`GET`), or `*`: "
            f"{when} A stale tag, or no resource, is `412 PreconditionFailed`, a final "
            "answer stored and replayed under the key. The header is not part of the "
            "fingerprint: a retry under the same key replays the first answer, whatever the "
            "tag says by then."
        ),
    )


PRECONDITION_FAILED = Refusal(
    PreconditionFailed(),
    "`If-Match` names no current ETag of the resource (it changed since you read it), or "
    "there is none. Read it again and decide.",
)


def path_id(name: str, prefix: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        location=OpenApiParameter.PATH,
        required=True,
        type=str,
        description=f"An opaque id, `{prefix}_…`.",
    )


CURSOR = OpenApiParameter(
    "cursor",
    type=str,
    description=(
        "Opaque and signed: pass back the `nextCursor` or `previousCursor` of a page (the "
        "`next` and `previous` links carry the same). It is good only on the list that "
        "issued it: the same path, tenant and filters (`type`; not `pageSize`). Any other "
        "(made up, of another list or filter, or issued under another `SECRET_KEY`) is "
        "`400 ValidationError`; start again without a cursor."
    ),
)
PAGE_SIZE = OpenApiParameter(
    "pageSize",
    type={
        "type": "integer",
        "minimum": MIN_PAGE_SIZE,
        "maximum": MAX_PAGE_SIZE,
        "default": DEFAULT_PAGE_SIZE,
    },
    description=(
        f"Results per page: an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}, default "
        f"{DEFAULT_PAGE_SIZE}. Anything else is `400 ValidationError`, never quietly replaced."
    ),
    examples=[OpenApiExample("Twenty", value=20)],
)
INVALID_LIST_QUERY = Refusal(
    InvalidListQuery(
        details={"pageSize": [f"Must be an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}."]}
    ),
    f"`pageSize` is not an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}, or `cursor` is "
    "not one this list issued; `details` names the parameter.",
    members=FIELD_ERRORS,
)


def cursor_page(
    item: type[serializers.Serializer[Any]] | Callable[..., Any], name: str
) -> type[serializers.Serializer[Any]]:
    """The response of a list: ``{"results", "next", "previous", "nextCursor", "previousCursor"}``.

    The views paginate by hand (api.pagination), so drf-spectacular cannot
    see the envelope; this serializer describes it and names its component.
    ``item`` makes the results' serializer, given ``many=True``: a
    serializer class, or a function that makes one (a polymorphic proxy).
    """
    link = "Path-absolute URL of the {} page, or null.".format
    cursor = "The `cursor` parameter that asks for the {} page, or null.".format
    fields: dict[str, Any] = {
        "results": item(many=True),
        "next": serializers.CharField(allow_null=True, help_text=link("next")),
        "previous": serializers.CharField(allow_null=True, help_text=link("previous")),
        "nextCursor": serializers.CharField(allow_null=True, help_text=cursor("next")),
        "previousCursor": serializers.CharField(allow_null=True, help_text=cursor("previous")),
    }
    return type(name, (serializers.Serializer,), fields)
