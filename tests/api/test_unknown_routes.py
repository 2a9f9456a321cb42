"""A path no route matches is answered with where to go: the route meant, or the API's map.

`GET /` and `/v1/orders/` used to answer a bare "Not found.", which leaves a
newcomer nowhere. The answer stays a 404 problem, never a redirect: a
client follows a 301 or 302 with a GET, and a command's body would be lost.
"""

import json
import re
from typing import Any

import pytest
from django.http import Http404
from django.test import Client, RequestFactory
from django.urls import get_resolver, resolve

from api.errors import page_not_found
from orders.models import Order
from tests.idempotency.test_every_command_is_idempotent import state_changing_endpoints
from tests.support.http import ORDER, Api

pytestmark = pytest.mark.django_db


def _not_found(response: Any) -> str:
    """The message of a 404 NotFound problem."""
    assert response.status_code == 404, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert "Location" not in response
    problem: dict[str, Any] = json.loads(response.content)
    assert problem["error"] == "NotFound"
    message: str = problem["message"]
    return message


def test_the_root_names_the_schema_and_the_docs_and_both_are_there(client: Client) -> None:
    message = _not_found(client.get("/"))

    named = set(re.findall(r"/\S*/", message))
    assert {"/v1/", "/v1/schema/", "/docs/"} <= named, message
    # What the message names is routed, and the schema is there for anyone.
    for path in named - {"/v1/"}:
        resolve(path)
    assert client.get("/v1/schema/").status_code == 200


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/orders/", "/v1/orders"),
        ("/v1/orders/ord_abc/", "/v1/orders/ord_abc"),
        ("/orders", "/v1/orders"),
        ("/orders/", "/v1/orders"),
    ],
)
def test_a_near_miss_names_the_route(client: Client, path: str, route: str) -> None:
    message = _not_found(client.get(path))

    assert f" {route} does " in message, message


def test_a_command_sent_with_a_trailing_slash_is_named_and_not_carried_out(api: Api) -> None:
    response = api.post("/v1/orders/", ORDER, key="slash")

    assert "/v1/orders does (without the trailing slash)" in _not_found(response)
    assert not Order.objects.exists()


def test_a_path_near_no_route_gets_the_map_without_its_own_text(client: Client) -> None:
    message = _not_found(client.get("/v1/no-such-thing"))

    assert "/v1/schema/" in message
    assert "no-such-thing" not in message


def test_a_missing_object_on_a_route_is_not_called_a_missing_route() -> None:
    # Http404 from a view (the admin's, a page's) is no routing miss.
    response = page_not_found(RequestFactory().get("/v1/orders"), Http404())

    assert "route" not in _not_found(response)


def test_no_route_that_changes_state_ends_with_a_slash() -> None:
    # APPEND_SLASH redirects a path missing its slash to a route that has
    # one; a command there would lose its body to the redirect.
    endpoints = list(state_changing_endpoints(get_resolver().url_patterns))

    assert endpoints
    assert [str(e) for e in endpoints if e.route.endswith("/")] == []
