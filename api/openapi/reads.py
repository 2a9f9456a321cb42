"""``extend_schema`` for a read, with everything the API promises of every read.

:func:`read_schema` adds ``401``, ``406``, ``429``, ``500``, ``503`` and
``X-Request-ID``, so that no endpoint can forget one; commands add the
idempotency layer's part (idempotency/schema.py).
"""

from collections.abc import Callable, Sequence
from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)

from api.openapi.parameters import (
    ETAG,
    IF_NONE_MATCH,
    NOT_MODIFIED,
    REQUEST_ID,
    WWW_AUTHENTICATE,
    retry_after_header,
)
from api.openapi.problems import (
    AUTHENTICATION_FAILED,
    INTERNAL_ERROR,
    NOT_ACCEPTABLE,
    NOT_AUTHENTICATED,
    SERVICE_UNAVAILABLE,
    THROTTLED,
    URI_TOO_LONG,
    Refusal,
    problem_responses,
)

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def read_schema(
    *,
    operation_id: str,
    summary: str,
    description: str,
    tag: str,
    response: OpenApiResponse,
    refusals: Sequence[Refusal],
    parameters: Sequence[OpenApiParameter] = (),
    retry_after: bool = False,
    conditional: bool = False,
    public: bool = False,
) -> Decorator:
    """``extend_schema`` for a read: its body, ``401`` and the other errors.

    ``refusals`` are the read's own: ``404`` for a resource, ``400`` for a list.
    ``conditional``: the read answers an ``ETag``, and ``304`` to ``If-None-Match``
    (:func:`api.conditional.conditional_read`).
    ``public``: the read needs no token and reads no database (the idempotency
    policy), so it has no ``401``, ``429`` or ``503`` to document.
    """
    every_refusal = [
        *(() if public else (NOT_AUTHENTICATED, AUTHENTICATION_FAILED)),
        *refusals,
        URI_TOO_LONG,
        NOT_ACCEPTABLE,
        *(() if public else (THROTTLED,)),
        INTERNAL_ERROR,
        *(() if public else (SERVICE_UNAVAILABLE,)),
    ]
    problems = problem_responses(every_refusal, operation_id=operation_id, own=refusals)
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        tags=[tag],
        responses={200: response, **({304: NOT_MODIFIED} if conditional else {}), **problems},
        parameters=[
            *parameters,
            *((IF_NONE_MATCH, ETAG) if conditional else ()),
            REQUEST_ID,
            *(
                ()
                if public
                else (WWW_AUTHENTICATE, retry_after_header(_retried(retry_after, conditional)))
            ),
        ],
        # No token: no security requirement (None leaves drf-spectacular's own).
        auth=[] if public else None,
    )


def _retried(retry_after: bool, conditional: bool) -> list[int]:
    """The statuses that carry ``Retry-After``: 429 and 503, and the read's own if it asks."""
    own = ([200, 304] if conditional else [200]) if retry_after else []
    return [*own, 429, 503]
