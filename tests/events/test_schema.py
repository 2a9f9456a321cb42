"""What the OpenAPI schema tells a consumer of the feed and of the webhooks."""

import json
from typing import Any

import pytest
from django.test import Client

from events import addresses, registry

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    response = Client().get("/v1/schema/", {"format": "json"})
    document: dict[str, Any] = json.loads(response.content)
    return document


def test_an_event_is_one_of_the_registered_types_each_with_its_resource(
    schema: dict[str, Any],
) -> None:
    components = schema["components"]["schemas"]
    event = components["Event"]

    mapping = event["discriminator"]["mapping"]
    assert list(mapping) == registry.types()
    for name, reference in mapping.items():
        one = components[reference.rsplit("/", 1)[1]]
        data = one["properties"]["data"]["allOf"][0]["$ref"]
        expected = "OrderOutput" if name.startswith("order.") else "PaymentOutput"
        assert data == f"#/components/schemas/{expected}", name


def test_the_webhook_request_is_documented_with_its_headers_and_body(
    schema: dict[str, Any],
) -> None:
    command = schema["paths"]["/v1/webhook-endpoints"]["post"]
    (delivery,) = command["callbacks"]["event"].values()
    post = delivery["post"]

    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Event"
    }
    assert [(p["in"], p["name"], p["required"]) for p in post["parameters"]] == [
        ("header", "webhook-id", True),
        ("header", "webhook-timestamp", True),
        ("header", "webhook-signature", True),
    ]


def test_the_secret_is_in_the_creation_answer_alone(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]

    assert "secret" in components["CreatedWebhookEndpointOutput"]["properties"]
    assert "secret" not in components["WebhookEndpointOutput"]["properties"]


def test_a_host_that_does_not_resolve_in_time_is_documented_as_a_503_not_stored(
    schema: dict[str, Any],
) -> None:
    command = schema["paths"]["/v1/webhook-endpoints"]["post"]
    unavailable = command["responses"]["503"]["description"]

    assert (
        f"host did not resolve within {addresses.RESOLVE_TIMEOUT:g} s, or "
        f"{addresses.LOOKUPS_PER_TENANT} of the tenant's host names" in unavailable
    )
    assert f"seconds ({addresses.RESOLVE_RETRY_AFTER_SECONDS})" in unavailable
    assert unavailable.count("Not stored:") == 2
    assert "64:ff9b::/96" in command["description"]
