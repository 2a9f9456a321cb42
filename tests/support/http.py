"""Talking to the API in this process: a client per principal, the order body, answers as JSON.

The fixtures that hand these out (``api``, ``other_api``, ``stranger_api``,
``order_body``) are in tests/conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from django.http import HttpResponse
from django.test import Client

from accounts.models import Principal

if TYPE_CHECKING:
    # What Django's test client answers: a response with .json() and
    # .wsgi_request. The name exists in django-stubs only; at run time,
    # where it only ever annotates, it stands for HttpResponse.
    from django.test.client import _MonkeyPatchedWSGIResponse

    ClientResponse: TypeAlias = _MonkeyPatchedWSGIResponse
else:
    ClientResponse = HttpResponse

# The order every test places unless it needs another: 2 x ABC, 3980 RUB.
ORDER: dict[str, Any] = {
    "customerId": "cust-1",
    "items": [{"sku": "ABC", "qty": 2}],
    "currency": "RUB",
}


@dataclass
class Api:
    """A client authenticated as one principal, speaking JSON."""

    client: Client
    token: str
    principal: Principal

    def headers(self, key: str | None = None, **extra: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}", **extra}
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers

    def post(
        self, path: str, body: Any = None, *, key: str | None = None, **headers: str
    ) -> ClientResponse:
        """POST ``body`` as JSON (text or bytes are sent as they are)."""
        return self._send(self.client.post, path, body, key, headers)

    def put(
        self, path: str, body: Any = None, *, key: str | None = None, **headers: str
    ) -> ClientResponse:
        """PUT ``body`` as JSON (text or bytes are sent as they are)."""
        return self._send(self.client.put, path, body, key, headers)

    def delete(
        self, path: str, body: Any = None, *, key: str | None = None, **headers: str
    ) -> ClientResponse:
        """DELETE, with ``body`` as JSON if there is one."""
        return self._send(self.client.delete, path, body, key, headers)

    def _send(
        self,
        method: Callable[..., ClientResponse],
        path: str,
        body: Any,
        key: str | None,
        headers: dict[str, str],
    ) -> ClientResponse:
        raw = body if isinstance(body, str | bytes) else json.dumps(body)
        return method(
            path,
            data=raw if body is not None else "",
            content_type="application/json",
            headers=self.headers(key, **headers),
        )

    def get(self, path: str, **headers: str) -> ClientResponse:
        return self.client.get(path, headers=self.headers(**headers))


def body_of(response: HttpResponse | ClientResponse) -> Any:
    """The JSON body of an answer."""
    return json.loads(response.content)


def problem(response: HttpResponse | ClientResponse) -> Any:
    """The body of an error answer, which must be problem+json."""
    assert response["Content-Type"] == "application/problem+json"
    return body_of(response)


def payment_body(
    order: dict[str, Any], method: str = "pm_card_ok", **changes: Any
) -> dict[str, Any]:
    """A ``POST /v1/payments`` body paying ``order`` (as the API answers it) in full."""
    return {
        "orderId": order["id"],
        "amount": order["totalAmount"],
        "currency": order["currency"],
        "paymentMethod": method,
        **changes,
    }
