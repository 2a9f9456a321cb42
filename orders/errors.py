"""Refusals shared by several order commands."""

from config.exceptions import ApplicationError


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


class OrderStateConflict(ApplicationError):
    status_code = 409
    code = "OrderStateConflict"
    title = "Order state conflict"
    default_message = "The order's state does not allow this command."
