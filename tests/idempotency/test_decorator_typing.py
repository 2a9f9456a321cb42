"""The protocol keeps the signature of the view method it decorates.

mypy (``make check``) reads this file as much as pytest runs it. Were
``idempotent_command`` to answer a bare ``Callable[..., Any]``, the call
marked ``type: ignore`` below would no longer be an error, and mypy's
``warn_unused_ignores`` (part of ``--strict``) would say so; ``assert_type``
fails the check if the answer's type widens. At run time, the same
function keeps its name and what it wraps, which the documentation and the
test that every state-changing route is idempotent read.
"""

import inspect
from typing import assert_type

from django.http import HttpResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.commands import idempotent_command


class _Shipments(APIView):
    @idempotent_command
    def post(self, request: Request, order_id: str) -> Response:
        """Ship an order."""
        return Response({"orderId": order_id}, status=201)


def _typed_calls(view: _Shipments, request: Request) -> None:
    """Never run: the calls mypy checks against the decorated signature."""
    assert_type(view.post(request, "ord_1"), HttpResponse)
    view.post(request, 1)  # type: ignore[arg-type]


def test_the_decorated_method_keeps_its_name_its_docstring_and_what_it_wraps() -> None:
    idempotent = _Shipments.post
    assert idempotent.__name__ == "post"
    assert idempotent.__doc__ == "Ship an order."
    assert list(inspect.signature(idempotent).parameters) == ["self", "request", "order_id"]
    assert inspect.unwrap(idempotent) is not idempotent
    assert getattr(idempotent, "idempotent_command", False) is True
