"""Only a body that says it is ``application/json`` is read as one.

DRF matches a parser to the request's ``Content-Type`` both ways, so a
``*/*`` or ``application/*`` body would be parsed as JSON and run as a
command; a ``+json`` type means more than its syntax (api/parsers.py says
why neither is taken). Each is ``415 UnsupportedMediaType``, before the
command starts and with nothing stored.
"""

import json
from typing import Any

import pytest

from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support.http import Api


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON"],
)
def test_a_json_body_is_read(api: Api, order_body: dict[str, Any], content_type: str) -> None:
    response = api.client.post(
        "/v1/orders",
        json.dumps(order_body),
        content_type=content_type,
        headers=api.headers("media-type"),
    )

    assert response.status_code == 201, response.content
    assert Order.objects.count() == 1


@pytest.mark.parametrize(
    "content_type",
    [
        "*/*",
        "application/*",
        "*/json",
        "application/merge-patch+json",
        "application/problem+json",
        "text/json",
        "application/jsonx",
        "application/json-seq",
    ],
)
def test_any_other_media_type_is_refused_and_nothing_happens(
    api: Api, order_body: dict[str, Any], content_type: str
) -> None:
    response = api.client.post(
        "/v1/orders",
        json.dumps(order_body),
        content_type=content_type,
        headers=api.headers("media-type"),
    )

    assert response.status_code == 415, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["error"] == "UnsupportedMediaType"
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0
