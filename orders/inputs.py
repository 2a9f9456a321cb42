"""What the order and payment commands ask for, as the services take it.

Parsed from a request by orders.serializers, and given to orders.services;
a module of their own, so that each of those imports it, not the other.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class OrderLine:
    sku: str
    qty: int


@dataclass(frozen=True)
class NewOrder:
    customer_id: str
    currency: str
    items: list[OrderLine]


@dataclass(frozen=True)
class NewPayment:
    order_id: str
    amount: int
    currency: str
    payment_method: str
