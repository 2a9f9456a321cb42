"""The service's URLs, and beside them the baseline the protocol is measured against.

``POST /bench/bare/orders`` runs the very view method of ``POST
/v1/orders`` (the function under its decorators: same authentication,
parsing, validation, service call and answer) without
``@idempotent_command``. What a first execution costs over it is what the
protocol costs: the key's parsing, the fingerprint, the claim and the stored
answer. ``POST /bench/plain/orders`` sends PostgreSQL's ceiling for a create
through the same stack, from a plain Django view (tests/bench/plain_view.py).
"""

import inspect

from django.urls import path
from rest_framework.views import APIView

from config.urls import urlpatterns as service_urlpatterns
from orders.views import OrderCollection
from tests.bench.plain_view import create_order_plainly


class BareOrders(APIView):
    # Below @idempotent_command (functools.wraps keeps what it wraps).
    post = inspect.unwrap(OrderCollection.post)


urlpatterns = [
    path("bench/bare/orders", BareOrders.as_view()),
    path("bench/plain/orders", create_order_plainly),
    *service_urlpatterns,
]
