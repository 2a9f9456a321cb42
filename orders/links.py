"""Where the orders API's resources live: ``Location`` headers and ``links``.

Path-absolute, as the API promises, and spelled once: the URLconf
(orders/urls.py) routes these paths and everything else builds them here.
"""


def order_path(order_id: str) -> str:
    return f"/v1/orders/{order_id}"


def payment_path(payment_id: str) -> str:
    return f"/v1/payments/{payment_id}"
