"""What "the same request" leaves out, said and pinned (docs/SPECIFICATION.md §3 rule 3).

The fingerprint covers the method, the route with its path parameters and
the canonical body. Two parts of a request are outside it: the query string,
which no command reads and which is therefore refused rather than ignored,
and the media type's parameters, which say nothing a JSON body does not.
"""

import json
from typing import Any

import pytest

from idempotency.commands import NO_QUERY_STRING
from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support.http import Api, problem

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["dryRun=1", "dryRun", "a=1&b=2", "="])
def test_a_command_with_a_query_string_is_refused_before_it_starts(
    api: Api, order_body: dict[str, Any], query: str
) -> None:
    response = api.post(f"/v1/orders?{query}", order_body, key="K")

    assert response.status_code == 400
    body = problem(response)
    assert body["error"] == "ValidationError"
    assert list(body["details"]) == ["query"]
    assert body["message"] == "The request is not valid; see details."
    assert body["details"]["query"] == [NO_QUERY_STRING]
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


def test_the_key_stays_free_for_the_request_without_its_query_string(
    api: Api, order_body: dict[str, Any]
) -> None:
    refused = api.post("/v1/orders?dryRun=1", order_body, key="K")

    placed = api.post("/v1/orders", order_body, key="K")

    assert refused.status_code == 400
    assert placed.status_code == 201
    assert "Idempotent-Replayed" not in placed
    assert Order.objects.count() == 1


def test_a_retry_with_a_query_string_is_refused_and_does_not_replay(
    api: Api, order_body: dict[str, Any]
) -> None:
    # A replay would tell the client that a dry run was placed for real.
    placed = api.post("/v1/orders", order_body, key="K")

    again = api.post("/v1/orders?dryRun=1", order_body, key="K")

    assert placed.status_code == 201
    assert again.status_code == 400
    assert "Idempotent-Replayed" not in again
    assert Order.objects.count() == 1


def test_reads_still_take_their_query_parameters(api: Api) -> None:
    response = api.get("/v1/orders?pageSize=1")

    assert response.status_code == 200


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "Application/JSON", 'application/json; charset="UTF-8"'],
)
def test_media_type_parameters_and_case_do_not_change_the_request(
    api: Api, order_body: dict[str, Any], content_type: str
) -> None:
    first = api.post("/v1/orders", order_body, key="K")

    again = api.client.post(
        "/v1/orders",
        json.dumps(order_body),
        content_type=content_type,
        headers=api.headers("K"),
    )

    assert first.status_code == 201
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert Order.objects.count() == 1
