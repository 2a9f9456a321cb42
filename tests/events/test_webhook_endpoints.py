"""Webhook endpoints: commands to create and disable them, reads without the secret, SSRF refused.

docs/SPECIFICATION.md §4 rule 13.
"""

from typing import Any

import pytest
from pytest_django import Settings

from events.models import Delivery, WebhookEndpoint
from tests.support.http import Api, body_of, problem

pytestmark = pytest.mark.django_db

# A public address, literally: nothing resolves, and nothing is sent (the
# test's transaction never commits, so no delivery is published).
PUBLIC = "https://192.0.32.10/hooks"


def subscribe(api: Api, url: str = PUBLIC, key: str = "S", types: Any = None) -> Any:
    return api.post("/v1/webhook-endpoints", {"url": url, "eventTypes": types or ["*"]}, key=key)


def test_creating_an_endpoint_answers_its_secret_once_and_its_replays_the_same(
    api: Api,
) -> None:
    created = subscribe(api)
    replayed = subscribe(api)

    assert created.status_code == 201
    body = body_of(created)
    assert body["id"].startswith("whe_")
    assert body["secret"].startswith("whsec_")
    assert body["status"] == "enabled"
    assert body["eventTypes"] == ["*"]
    assert created["Location"] == f"/v1/webhook-endpoints/{body['id']}"
    assert replayed["Idempotent-Replayed"] == "true"
    assert body_of(replayed) == body
    assert WebhookEndpoint.objects.count() == 1
    read = body_of(api.get(f"/v1/webhook-endpoints/{body['id']}"))
    listed = body_of(api.get("/v1/webhook-endpoints"))["results"]
    assert "secret" not in read
    assert listed == [read]
    assert read == {k: v for k, v in body.items() if k != "secret"}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hooks",
        # A name that resolves to 127.0.0.1.
        "http://localhost:8000/hooks",
        "http://10.1.2.3/hooks",
        "http://192.168.0.10/hooks",
        "http://172.16.0.1/hooks",
        # The cloud's metadata service: link-local.
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hooks",
        "http://[::ffff:127.0.0.1]/hooks",
        "http://[fe80::1]/hooks",
        "http://224.0.0.1/hooks",
        "http://0.0.0.0/hooks",
        "ftp://192.0.32.10/hooks",
        "https://user:password@192.0.32.10/hooks",
        "https:///no-host",
        "not a url",
    ],
)
def test_a_url_the_service_must_not_call_is_refused_and_nothing_is_made(api: Api, url: str) -> None:
    response = subscribe(api, url)

    assert response.status_code == 400
    assert problem(response)["error"] == "ValidationError"
    assert list(problem(response)["details"]) == ["url"]
    assert not WebhookEndpoint.objects.exists()


def test_private_urls_are_allowed_where_the_deployment_says_so(
    api: Api, settings: Settings
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True

    assert subscribe(api, "http://localhost:8000/hooks").status_code == 201


def test_a_private_url_is_refused_with_the_setting_that_allows_it_and_stays_refused_under_its_key(
    api: Api, settings: Settings
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    url = "http://127.0.0.1:8000/hooks"

    refused = subscribe(api, url, key="local")
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    replayed = subscribe(api, url, key="local")
    created = subscribe(api, url, key="local-again")

    assert refused.status_code == 400
    (message,) = problem(refused)["details"]["url"]
    assert "WEBHOOK_ALLOW_PRIVATE_URLS=true" in message
    # What docs/DEPLOYING.md says of the setting: the refusal is the key's
    # final answer, so a retry under it after the change is refused again.
    assert replayed.status_code == 400
    assert replayed["Idempotent-Replayed"] == "true"
    assert created.status_code == 201


def test_an_unknown_event_type_is_refused(api: Api) -> None:
    response = subscribe(api, types=["order.created", "order.exploded"])

    assert response.status_code == 400
    assert list(problem(response)["details"]) == ["eventTypes"]


def test_a_tenant_has_a_bounded_number_of_enabled_endpoints(api: Api, settings: Settings) -> None:
    settings.WEBHOOK_ENDPOINTS_PER_TENANT = 2
    first = body_of(subscribe(api, key="1"))
    subscribe(api, key="2")

    refused = subscribe(api, key="3")
    assert refused.status_code == 409
    assert problem(refused)["error"] == "TooManyWebhookEndpoints"
    assert problem(refused)["message"].startswith("A tenant has at most 2 enabled")
    # Disabling one makes room.
    api.delete(f"/v1/webhook-endpoints/{first['id']}", key="D")
    assert subscribe(api, key="4").status_code == 201


def test_disabling_an_endpoint_ends_its_pending_deliveries(
    api: Api, order_body: dict[str, Any]
) -> None:
    endpoint = body_of(subscribe(api))
    api.post("/v1/orders", order_body, key="O")
    assert Delivery.objects.get().status == "pending"

    disabled = api.delete(f"/v1/webhook-endpoints/{endpoint['id']}", key="D")
    again = api.delete(f"/v1/webhook-endpoints/{endpoint['id']}", key="D2")

    assert disabled.status_code == again.status_code == 200
    assert body_of(disabled)["status"] == "disabled"
    assert "secret" not in body_of(disabled)
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.last_error) == (
        "failed",
        "The endpoint was disabled before the event was delivered.",
    )
    # Nothing more is delivered to it.
    api.post("/v1/orders", order_body, key="O2")
    assert Delivery.objects.count() == 1


def test_only_the_types_an_endpoint_names_are_delivered_to_it(
    api: Api, order_body: dict[str, Any]
) -> None:
    subscribe(api, types=["payment.succeeded"])

    api.post("/v1/orders", order_body, key="O")

    assert not Delivery.objects.exists()


def test_another_tenants_endpoints_are_invisible(api: Api, stranger_api: Api) -> None:
    endpoint = body_of(subscribe(api))

    assert stranger_api.get(f"/v1/webhook-endpoints/{endpoint['id']}").status_code == 404
    assert stranger_api.get(f"/v1/webhook-endpoints/{endpoint['id']}/deliveries").status_code == 404
    assert (
        stranger_api.delete(f"/v1/webhook-endpoints/{endpoint['id']}", key="D").status_code == 404
    )
    assert body_of(stranger_api.get("/v1/webhook-endpoints"))["results"] == []
