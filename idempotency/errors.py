"""The refusals of the idempotency layer (docs/SPECIFICATION.md §3)."""

from api.errors import ApplicationError, NotFound
from idempotency.policy import MAX_KEY_LENGTH


class IdempotencyKeyRequired(ApplicationError):
    status_code = 400
    code = "IdempotencyKeyRequired"
    title = "Idempotency-Key required"
    default_message = "Commands require an Idempotency-Key header."


class IdempotencyKeyInvalid(ApplicationError):
    status_code = 400
    code = "IdempotencyKeyInvalid"
    title = "Idempotency-Key invalid"
    default_message = (
        f"Idempotency-Key must be one key of 1 to {MAX_KEY_LENGTH} visible ASCII characters "
        '(! to ~, no comma), plain or as a structured-field string ("…"), sent once.'
    )


class IdempotencyKeyConflict(ApplicationError):
    status_code = 409
    code = "IdempotencyKeyConflict"
    title = "Idempotency-Key conflict"
    default_message = "Same Idempotency-Key used with different request payload."


class IdempotencyKeyInProgress(ApplicationError):
    status_code = 409
    code = "IdempotencyKeyInProgress"
    title = "Idempotency-Key in progress"
    default_message = (
        "A request with this Idempotency-Key is still being processed; retry after the "
        "Retry-After delay."
    )


class KeyQuotaExceeded(ApplicationError):
    """The principal's stored keys fill its storage (rule 12): no new key until some expire."""

    status_code = 429
    code = "KeyQuotaExceeded"
    title = "Idempotency key storage full"
    default_message = (
        "Your idempotency keys fill the storage allowed to you; retry after the Retry-After "
        "delay, when enough of them have expired. Retries of commands you sent before are "
        "still answered."
    )


class NoSuchIdempotencyKey(NotFound):
    """The look-up's key names none of the caller's completed, unexpired keys (rule 11)."""

    default_message = "You have no completed idempotency key by that name that has not expired."
