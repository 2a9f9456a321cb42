"""What the events and webhook endpoints refuse."""

from typing import Any

from api.errors import ApplicationError, NotFound, ServiceUnavailable


class NoSuchEvent(NotFound):
    """An event id in the path names no event of the caller's tenant."""


class NoSuchWebhookEndpoint(NotFound):
    """A webhook endpoint id in the path names none of the caller's tenant."""


class InvalidWebhookEndpoint(ApplicationError):
    """A webhook endpoint the service will not deliver to; ``details`` says why."""

    status_code = 400
    code = "ValidationError"
    title = "Validation failed"
    default_message = "The request body is not valid; see details."


class TooManyWebhookEndpoints(ApplicationError):
    """The tenant has ``WEBHOOK_ENDPOINTS_PER_TENANT`` enabled endpoints already.

    A conflict with the state of the collection, not a fault of the
    request: the same body succeeds once an endpoint is disabled.
    """

    status_code = 409
    code = "TooManyWebhookEndpoints"
    title = "Too many webhook endpoints"
    default_message = "The tenant has the most enabled webhook endpoints it may: disable one first."


class WebhookHostUnresolved(ServiceUnavailable):
    """The URL's host did not resolve in time, or too many lookups are running.

    Our side's failure (events.addresses.Unresolved), not the client's: a
    ``503`` with ``Retry-After``, stored nowhere, so the retry under the same
    key resolves the name again (docs/SPECIFICATION.md §4).
    """

    default_message = (
        "The URL's host could not be resolved just now, so the endpoint was not created. "
        "Retry it after the number of seconds in Retry-After."
    )

    def __init__(self, message: str | None = None, *, retry_after: int, **kwargs: Any) -> None:
        kwargs.setdefault("headers", {"Retry-After": str(retry_after)})
        super().__init__(message, **kwargs)
