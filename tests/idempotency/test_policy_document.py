"""docs/SPECIFICATION.md §3 rule 15: the policy as data, ``GET /v1/idempotency-policy``.

The numbers are the running settings', and the list of commands is held
to the code twice: to the routes whose handlers carry the protocol
(test_every_command_is_idempotent.py's walk of the URL configuration),
and to the OpenAPI schema's operations that require the key.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import get_resolver, include, path
from pytest_django import Settings

from idempotency import published
from idempotency.headers import HEADER
from tests.idempotency.test_every_command_is_idempotent import (
    BareApiView,
    DecoratedApiView,
    DecoratedViewSet,
    state_changing_endpoints,
)

POLICY = "/v1/idempotency-policy"
SPECIFICATION = Path(__file__).resolve().parents[2] / "docs" / "SPECIFICATION.md"
# A Django route's parameter, ``<id:order_id>``, and the schema's, ``{orderId}``.
ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?\w+>")
TEMPLATE_PARAMETER = re.compile(r"\{\w+\}")


def read_policy(**headers: str) -> tuple[int, dict[str, str], Any]:
    response = Client().get(POLICY, headers=headers)
    return response.status_code, dict(response.headers), json.loads(response.content)


def test_the_policy_needs_no_token_and_reads_no_database() -> None:
    # No db fixture: pytest-django fails any query of this test.
    anonymous = read_policy()
    stale_token = read_policy(Authorization="Bearer osk_revoked")

    assert anonymous[0] == stale_token[0] == 200
    assert anonymous[2] == stale_token[2]


def test_the_policy_is_cacheable_for_at_most_an_hour() -> None:
    status, headers, _ = read_policy()

    assert status == 200
    assert headers["Cache-Control"] == f"public, max-age={published.MAX_AGE_SECONDS}"
    assert 0 < published.MAX_AGE_SECONDS <= 3600
    # As the specification quotes it.
    assert f"max-age={published.MAX_AGE_SECONDS}`" in SPECIFICATION.read_text()


def test_the_policy_has_the_contracts_shape_and_the_defaults() -> None:
    _, headers, policy = read_policy()

    assert headers["Content-Type"] == "application/json"
    assert {name: value for name, value in policy.items() if name != "commands"} == {
        "header": HEADER,
        "keyMaxLength": 255,
        "retentionSeconds": 86400,
        "waitSeconds": 2.0,
        "lockTimeoutSeconds": 30.0,
        "storagePerPrincipalBytes": 512 * 1024 * 1024,
        "fingerprint": {
            "canonicalization": "RFC 8785",
            "hash": "SHA-256",
            "covers": ["method", "path", "body"],
        },
    }
    assert policy["commands"][0] == {"method": "POST", "path": "/v1/orders"}


def test_the_numbers_are_the_running_settings(settings: Settings) -> None:
    settings.IDEMPOTENCY_KEY_TTL = 3600
    settings.IDEMPOTENCY_WAIT = 0.5
    settings.IDEMPOTENCY_LOCK_TIMEOUT = 12.0
    settings.IDEMPOTENCY_STORAGE_PER_PRINCIPAL = 1024 * 1024

    _, _, policy = read_policy()

    assert policy["retentionSeconds"] == 3600
    assert policy["waitSeconds"] == 0.5
    assert policy["lockTimeoutSeconds"] == 12.0
    assert policy["storagePerPrincipalBytes"] == 1024 * 1024


def test_the_commands_are_exactly_the_routes_under_the_protocol() -> None:
    guarded = {
        (endpoint.method, ROUTE_PARAMETER.sub("{}", "/" + endpoint.route))
        for endpoint in state_changing_endpoints(get_resolver().url_patterns)
        if endpoint.is_command
    }

    _, _, policy = read_policy()

    listed = [(c["method"], TEMPLATE_PARAMETER.sub("{}", c["path"])) for c in policy["commands"]]
    assert len(listed) == len(set(listed)) == 6
    assert set(listed) == guarded


def test_the_commands_are_exactly_the_schemas_operations_that_require_the_key() -> None:
    schema = json.loads(Client().get("/v1/schema/", {"format": "json"}).content)
    requiring_the_key = {
        (method.upper(), template)
        for template, item in schema["paths"].items()
        for method, operation in item.items()
        if any(
            parameter["in"] == "header" and parameter["name"] == HEADER and parameter["required"]
            for parameter in operation.get("parameters", [])
        )
    }

    _, _, policy = read_policy()

    assert {(c["method"], c["path"]) for c in policy["commands"]} == requiring_the_key


def test_the_schema_documents_the_policy_as_served() -> None:
    schema = json.loads(Client().get("/v1/schema/", {"format": "json"}).content)
    operation = schema["paths"][POLICY]["get"]
    body = schema["components"]["schemas"]["IdempotencyPolicyOutput"]

    _, _, policy = read_policy()

    assert operation["operationId"] == "getIdempotencyPolicy"
    # No token: no security requirement, and so no 401 to document.
    assert "security" not in operation
    assert "401" not in operation["responses"]
    assert set(body["properties"]) == set(body["required"]) == set(policy)


# A URL configuration of its own: commands routed as an APIView method and
# as a ViewSet action, beside a state-changing route without the protocol.
urlpatterns = [
    path("v1/widgets", DecoratedApiView.as_view()),
    path("v1/widgets/<str:widget_id>/ship", BareApiView.as_view()),
    path(
        "v1/",
        include([path("gadgets/<str:gadget_id>", DecoratedViewSet.as_view({"post": "archive"}))]),
    ),
]


@pytest.mark.urls("tests.idempotency.test_policy_document")
def test_a_command_is_listed_as_soon_as_it_is_routed_whatever_its_view() -> None:
    assert [str(route) for route in published.command_routes()] == [
        "POST /v1/gadgets/{gadgetId}",
        "PUT /v1/widgets",
    ]
