"""What the events and webhook endpoints refuse."""

from api.errors import ApplicationError, NotFound


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
