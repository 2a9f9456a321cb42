"""The refusals of the order and payment services and selectors.

Each is an :class:`api.errors.ApplicationError`: the service raises it, and
the API layer renders it as a problem response with its status and code.
"""

from api.errors import ApplicationError, NotFound


class NoSuchOrder(NotFound):
    """An order id in the path names no order of the caller's tenant."""


class NoSuchPayment(NotFound):
    """A payment id in the path names no payment of the caller's tenant."""


class InvalidOrderId(ApplicationError):
    """A ``PUT`` names an id no client may choose.

    A ``ValidationError`` like a body's, but its message speaks of the path.
    Raised before the command starts, so it is not stored.
    """

    status_code = 400
    code = "ValidationError"
    title = "Validation failed"
    default_message = "The order id in the path is not one a client may choose; see details."


class UnknownOrder(ApplicationError):
    """An ``orderId`` in a request body names no order of the caller's tenant.

    ``422 OrderNotFound``, not ``404``: the URL names a resource that exists
    (the payments collection); it is the body that cannot be processed. So
    it is named as the body's other unknown names are (:class:`UnknownSku`),
    apart from :class:`NoSuchOrder`, an order id in the path (``404``).
    """

    status_code = 422
    code = "OrderNotFound"
    title = "Order not found"
    default_message = "The orderId does not name an order of yours."


class UnknownSku(ApplicationError):
    status_code = 422
    code = "UnknownSku"
    title = "Unknown SKU"
    default_message = "The order names a SKU that is not in the catalog."


class CurrencyMismatch(ApplicationError):
    status_code = 422
    code = "CurrencyMismatch"
    title = "Currency mismatch"
    default_message = "An item is priced in another currency than the order."


class AmountMismatch(ApplicationError):
    status_code = 422
    code = "AmountMismatch"
    title = "Amount mismatch"
    default_message = "The amount must equal the order's total."


class OrderStateConflict(ApplicationError):
    status_code = 409
    code = "OrderStateConflict"
    title = "Order state conflict"
    default_message = "The order's state does not allow this command."


class OrderAlreadyExists(ApplicationError):
    """A ``PUT`` names an id that holds a different order.

    A domain refusal, not ``IdempotencyKeyConflict``: the key may be new, it
    is the id that is taken. Like that conflict, ``details.mismatch`` names
    where the bodies differ, as JSON Pointers.
    """

    status_code = 409
    code = "OrderAlreadyExists"
    title = "Order already exists"
    default_message = "This order id holds a different order; choose another id."


class OrderAlreadyPaid(ApplicationError):
    status_code = 409
    code = "OrderAlreadyPaid"
    title = "Order already paid"
    default_message = "The order is paid already."


class PaymentInProgress(ApplicationError):
    status_code = 409
    code = "PaymentInProgress"
    title = "Payment in progress"
    default_message = "Another payment of this order is processing."
