"""Fixtures of the orders tests: orders placed in bulk through the service."""

from collections.abc import Callable

import pytest

from accounts.models import Tenant
from orders.inputs import NewOrder, OrderLine
from orders.models import Order
from orders.services import create_order

PlaceOrders = Callable[..., list[Order]]


@pytest.fixture
def place_orders(catalog: None) -> PlaceOrders:
    """``place_orders(tenant, count=…, lines=…)``: that many orders of that many
    lines, placed through ``create_order`` as a ``POST`` would (without the
    protocol, which a list never sees), oldest first."""

    def place(tenant: Tenant, *, count: int, lines: int) -> list[Order]:
        items = [OrderLine(sku="ABC" if i % 2 else "XYZ", qty=i + 1) for i in range(lines)]
        return [
            create_order(
                tenant=tenant,
                new_order=NewOrder(customer_id=f"cust-{n}", currency="RUB", items=items),
            )
            for n in range(count)
        ]

    return place
