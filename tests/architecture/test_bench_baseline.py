"""The bench's unguarded baseline is the service's own view, and only the bench serves it."""

import inspect

import pytest
from django.urls import Resolver404, resolve

from orders.views import OrderCollection
from tests.bench.urls import UnguardedOrders


def test_the_service_never_serves_the_unguarded_baseline() -> None:
    with pytest.raises(Resolver404):
        resolve("/bench/unguarded/orders")


def test_the_baseline_is_the_guarded_view_without_its_guard() -> None:
    assert getattr(OrderCollection.post, "idempotent_command", False)
    assert not hasattr(UnguardedOrders.post, "idempotent_command")
    assert UnguardedOrders.post is inspect.unwrap(OrderCollection.post)
    view = resolve("/bench/unguarded/orders", urlconf="tests.bench.urls").func
    assert getattr(view, "view_class", None) is UnguardedOrders
