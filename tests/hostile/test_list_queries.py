"""A list's query parameters are checked, and a cursor is trusted only by the list that signed it.

DRF's cursors are base64 of a position that goes straight into a query,
so a client could write its own: a time-zone offset PostgreSQL cannot read
was a 500, other made-up positions a 400 that spoke of the request body.
Signed, a cursor of one list was still taken by another: an orders cursor
on the feed was a 500 (a time read as a transaction id), and on another
endpoint's deliveries it skipped rows. Its page size is lenient: ``0``,
``-1`` or ``abc`` quietly meant the default. Now each is a
``400 ValidationError`` naming the parameter.
"""

from base64 import b64encode
from urllib.parse import quote

import pytest
from django.test import override_settings

from orders.inputs import NewOrder, OrderLine
from orders.services import create_order
from tests.support.http import ORDER, Api, ClientResponse, body_of, problem

pytestmark = pytest.mark.django_db


def drf_cursor(position: str) -> str:
    """A cursor as DRF writes one, unsigned, around any position a client likes."""
    return quote(b64encode(f"p={quote(position)}".encode()).decode())


@pytest.fixture
def three_orders(api: Api) -> None:
    for i in range(3):
        api.post("/v1/orders", ORDER, key=f"order-{i}")


def test_the_links_of_a_page_lead_through_the_list(api: Api, three_orders: None) -> None:
    first = api.get("/v1/orders?pageSize=2").json()
    second = api.get(first["next"]).json()
    back = api.get(second["previous"]).json()

    assert len(first["results"]) == 2
    assert len(second["results"]) == 1
    assert back["results"] == first["results"]


@pytest.mark.parametrize(
    "cursor",
    [
        drf_cursor("2026-11-30 16:00:00+99:00"),
        drf_cursor("2026-11-30 16:00:00+15:59"),
        drf_cursor("not a date"),
        drf_cursor("9999-99-99"),
        "%%%",
        "bm90IGEgY3Vyc29y",
        "W1swLGZhbHNlLG51bGxdXQ:forged",
    ],
)
def test_a_cursor_we_did_not_issue_is_a_400_naming_it(
    api: Api, three_orders: None, cursor: str
) -> None:
    response = api.get(f"/v1/orders?cursor={cursor}")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["error"] == "ValidationError"
    assert problem["message"] == "The query parameters are not valid; see details."
    assert list(problem["details"]) == ["cursor"]


def test_a_cursor_with_one_character_changed_is_refused(api: Api, three_orders: None) -> None:
    issued = api.get("/v1/orders?pageSize=1").json()["next"]
    token = issued.split("cursor=")[1]
    tampered = issued.replace(token, token[:-1] + ("A" if token[-1] != "A" else "B"))

    assert api.get(issued).status_code == 200
    assert api.get(tampered).status_code == 400


def test_a_cursor_signed_with_another_secret_key_is_refused(api: Api, three_orders: None) -> None:
    with override_settings(SECRET_KEY="another-secret-key-that-is-long-enough-0123456789"):
        foreign = api.get("/v1/orders?pageSize=1").json()["next"]
        assert api.get(foreign).status_code == 200

    response = api.get(foreign)

    assert response.status_code == 400
    assert list(response.json()["details"]) == ["cursor"]


# Every list, and the same list under another filter or for another
# endpoint: each is a list of its own, whose cursors no other takes.
LISTS = {
    "orders": "/v1/orders",
    "events": "/v1/events",
    "events of one type": "/v1/events?type=order.created",
    "webhook endpoints": "/v1/webhook-endpoints",
    "deliveries of one endpoint": "/v1/webhook-endpoints/{first}/deliveries",
    "deliveries of another": "/v1/webhook-endpoints/{second}/deliveries",
}
# The lists every tenant has at the same path.
TENANT_LISTS = ["orders", "events", "events of one type", "webhook endpoints"]
# Public, literally: nothing resolves, and nothing is sent (the test's
# transaction never commits, so no delivery is published).
HOOK = {"url": "https://192.0.32.10/hooks", "eventTypes": ["*"]}


def two_of_every_list(api: Api) -> dict[str, str]:
    """Two endpoints, and three orders with their events and deliveries: the lists' paths."""
    first, second = (
        body_of(api.post("/v1/webhook-endpoints", HOOK, key=f"hook-{n}"))["id"] for n in (1, 2)
    )
    for n in range(3):
        api.post("/v1/orders", ORDER, key=f"order-{n}")
    return {name: path.format(first=first, second=second) for name, path in LISTS.items()}


@pytest.fixture
def lists(api: Api) -> dict[str, str]:
    return two_of_every_list(api)


def with_cursor(path: str, cursor: str) -> str:
    return f"{path}{'&' if '?' in path else '?'}cursor={quote(cursor)}"


def cursor_of(api: Api, path: str) -> str:
    page = body_of(api.get(f"{path}{'&' if '?' in path else '?'}pageSize=1"))
    assert page["nextCursor"] is not None, page
    cursor: str = page["nextCursor"]
    return cursor


def assert_refused_as_not_issued(response: ClientResponse) -> None:
    assert response.status_code == 400, response.content
    body = problem(response)
    assert body["error"] == "ValidationError"
    assert list(body["details"]) == ["cursor"]


@pytest.mark.parametrize("name", LISTS)
def test_a_list_takes_its_own_cursor(api: Api, lists: dict[str, str], name: str) -> None:
    path = lists[name]

    response = api.get(with_cursor(path, cursor_of(api, path)))

    assert response.status_code == 200
    assert len(body_of(response)["results"]) >= 1


@pytest.mark.parametrize(("issuer", "user"), [(i, u) for i in LISTS for u in LISTS if i != u])
def test_a_cursor_of_one_list_is_refused_by_every_other(
    api: Api, lists: dict[str, str], issuer: str, user: str
) -> None:
    cursor = cursor_of(api, lists[issuer])

    assert_refused_as_not_issued(api.get(with_cursor(lists[user], cursor)))


@pytest.mark.parametrize("name", LISTS)
@pytest.mark.parametrize("garbage", ["%%%", "bm90IGEgY3Vyc29y", "W1swLGZhbHNlLG51bGxdXQ:forged"])
def test_a_garbage_cursor_is_refused_by_every_list(
    api: Api, lists: dict[str, str], name: str, garbage: str
) -> None:
    assert_refused_as_not_issued(api.get(with_cursor(lists[name], garbage)))


@pytest.mark.parametrize("name", TENANT_LISTS)
def test_a_cursor_of_another_tenant_is_refused_on_the_same_list(
    api: Api, stranger_api: Api, lists: dict[str, str], name: str
) -> None:
    theirs = two_of_every_list(stranger_api)[name]
    assert theirs == lists[name]

    assert_refused_as_not_issued(api.get(with_cursor(lists[name], cursor_of(stranger_api, theirs))))


@pytest.mark.parametrize(
    "page_size", ["0", "-1", "201", "abc", "", "1.5", "+5", "٣", "1e2", "5000"]
)
def test_a_page_size_other_than_1_to_200_is_a_400_naming_it(api: Api, page_size: str) -> None:
    response = api.get(f"/v1/orders?pageSize={quote(page_size)}")

    assert response.status_code == 400
    assert response.json()["error"] == "ValidationError"
    assert response.json()["details"] == {"pageSize": ["Must be an integer from 1 to 200."]}


@pytest.mark.parametrize(("page_size", "expected"), [("1", 1), ("200", 3), ("050", 3)])
def test_a_page_size_from_1_to_200_is_taken_as_sent(
    api: Api, three_orders: None, page_size: str, expected: int
) -> None:
    response = api.get(f"/v1/orders?pageSize={page_size}")

    assert response.status_code == 200
    assert len(response.json()["results"]) == expected


def test_a_page_holds_at_most_200_orders_and_leads_to_the_rest(api: Api) -> None:
    tenant = api.principal.tenant
    order = NewOrder(customer_id="c", currency="RUB", items=[OrderLine(sku="ABC", qty=1)])
    for _ in range(201):
        create_order(tenant=tenant, new_order=order)

    first = api.get("/v1/orders?pageSize=200").json()
    rest = api.get(first["next"]).json()

    assert len(first["results"]) == 200
    assert len(rest["results"]) == 1
    assert rest["next"] is None
