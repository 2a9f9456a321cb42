"""The bench's bare baseline is the service's own view, and only the bench serves it."""

import inspect

import pytest
from django.urls import Resolver404, resolve

from orders.views import OrderCollection
from tests.bench.urls import BareOrders


def test_the_service_never_serves_the_bare_baseline() -> None:
    with pytest.raises(Resolver404):
        resolve("/bench/bare/orders")


def test_the_baseline_is_the_command_view_without_its_protocol() -> None:
    assert getattr(OrderCollection.post, "idempotent_command", False)
    assert not hasattr(BareOrders.post, "idempotent_command")
    assert BareOrders.post is inspect.unwrap(OrderCollection.post)
    view = resolve("/bench/bare/orders", urlconf="tests.bench.urls").func
    assert getattr(view, "view_class", None) is BareOrders
