"""Every answer a command stores is given once and replayed: the registry, held to the code.

``idempotency.schema.STORED_ANSWERS`` is the one list of the answers each
command stores and replays under its key; the OpenAPI schema and the README
are written from it or tested against it (tests/docs). Here each of those
answers is made to happen through the HTTP API, the same request is sent
again under the same key, and the second must be the first's replay and
execute nothing. An answer of the registry without a scenario fails, and
so does a scenario whose answer the registry does not name.

The tests run in the test's transaction, so the operations a command starts
are never published (that happens after commit): nothing charges or refunds
behind the test's back, and no broker or worker is involved.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.urls import get_resolver

from events.models import Delivery, Event, WebhookEndpoint
from idempotency.models import IdempotencyKey
from idempotency.schema import STORED_ANSWERS
from operations.models import Operation
from orders.models import Order, OrderItem, Payment
from tests.support.http import Api, ClientResponse, body_of, payment_body, problem

pytestmark = pytest.mark.django_db

KEY = "stored-answer"
CHOSEN_ID = "ord_stored-answer_1"
STALE_TAG = '"stale"'


@dataclass(frozen=True)
class Request:
    """One request to a command, named by the command's operationId."""

    operation_id: str
    method: str
    path: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def create_order(body: dict[str, Any]) -> Request:
    return Request("createOrder", "post", "/v1/orders", body)


def put_order(body: dict[str, Any], **headers: str) -> Request:
    return Request("putOrder", "put", f"/v1/orders/{CHOSEN_ID}", body, headers)


def cancel_order(order_id: str, body: Any = None, **headers: str) -> Request:
    return Request("cancelOrder", "post", f"/v1/orders/{order_id}/cancel", body, headers)


def create_payment(body: dict[str, Any]) -> Request:
    return Request("createPayment", "post", "/v1/payments", body)


def create_webhook_endpoint(body: dict[str, Any]) -> Request:
    return Request("createWebhookEndpoint", "post", "/v1/webhook-endpoints", body)


def disable_webhook_endpoint(endpoint_id: str, body: Any = None) -> Request:
    return Request("disableWebhookEndpoint", "delete", f"/v1/webhook-endpoints/{endpoint_id}", body)


# A public address, literally: no name to resolve, and nothing is sent to it
# (the test's transaction never commits the deliveries).
ENDPOINT = {"url": "https://192.0.32.10/hooks", "eventTypes": ["*"]}


def send(api: Api, request: Request, key: str) -> ClientResponse:
    method = {"put": api.put, "delete": api.delete}.get(request.method, api.post)
    return method(request.path, request.body, key=key, **request.headers)


# --- Arranging the state each answer needs -----------------------------------------


def place(api: Api, body: dict[str, Any], key: str = "place") -> dict[str, Any]:
    response = api.post("/v1/orders", body, key=key)
    assert response.status_code == 201, response.content
    order: dict[str, Any] = body_of(response)["order"]
    return order


def place_paid(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    """An order paid by a charge that succeeded, as a worker would have recorded it."""
    order = place(api, body)
    row = Order.objects.get(tenant=api.principal.tenant, id=order["id"])
    Payment.objects.create(
        tenant=row.tenant,
        order=row,
        amount=row.total_amount,
        currency=row.currency,
        payment_method="pm_card_ok",
        status=Payment.Status.SUCCEEDED,
    )
    Order.objects.filter(pk=row.pk).update(status=Order.Status.PAID)
    return order


def refuse_rows(model: type[Any], check: str) -> None:
    """Make the database refuse every row of ``model`` written from now on that fails ``check``.

    ``NOT VALID``: the rows already there stay. The command's own write then
    fails with an IntegrityError, which is a bug to the service: a final ``500``.
    """
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        # A table with foreign-key checks pending (rows this test transaction
        # wrote) cannot be altered: run them now, then defer them again.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT refuses_rows CHECK ({check}) NOT VALID")


# --- The scenarios: one per stored answer ---------------------------------------------

Arrange = Callable[[Api, dict[str, Any]], Request]
# (operationId, status, code): the code None for a success.
Answer = tuple[str, int, str | None]
Registry = dict[str, frozenset[tuple[int, str | None]]]


@dataclass(frozen=True)
class Scenario:
    """The stored answer (operationId, status, code) that ``arrange``'s request gets."""

    operation_id: str
    status: int
    code: str | None
    arrange: Arrange

    @property
    def answer(self) -> Answer:
        return (self.operation_id, self.status, self.code)

    def __str__(self) -> str:
        return f"{self.operation_id}-{self.status}-{self.code or 'success'}"


SCENARIOS: list[Scenario] = []


def scenario(
    operation_id: str, status: int, code: str | None = None
) -> Callable[[Arrange], Arrange]:
    def register(arrange: Arrange) -> Arrange:
        SCENARIOS.append(Scenario(operation_id, status, code, arrange))
        return arrange

    return register


# createOrder


@scenario("createOrder", 201)
def an_order_is_placed(api: Api, body: dict[str, Any]) -> Request:
    return create_order(body)


@scenario("createOrder", 400, "ValidationError")
def an_order_of_a_zero_quantity_fails_validation(api: Api, body: dict[str, Any]) -> Request:
    return create_order({**body, "items": [{"sku": "ABC", "qty": 0}]})


@scenario("createOrder", 422, "UnknownSku")
def an_order_of_an_unknown_sku(api: Api, body: dict[str, Any]) -> Request:
    return create_order({**body, "items": [{"sku": "NOPE", "qty": 1}]})


@scenario("createOrder", 422, "CurrencyMismatch")
def an_order_of_an_item_priced_in_dollars(api: Api, body: dict[str, Any]) -> Request:
    return create_order({**body, "items": [{"sku": "USD1", "qty": 1}], "currency": "RUB"})


@scenario("createOrder", 500, "InternalError")
def an_order_the_database_refuses(api: Api, body: dict[str, Any]) -> Request:
    refuse_rows(Order, "false")
    return create_order(body)


# putOrder


@scenario("putOrder", 201)
def an_order_is_placed_under_its_id(api: Api, body: dict[str, Any]) -> Request:
    return put_order(body)


@scenario("putOrder", 200)
def the_id_holds_the_equivalent_order(api: Api, body: dict[str, Any]) -> Request:
    assert send(api, put_order(body), key="placed").status_code == 201
    return put_order(body)


@scenario("putOrder", 400, "ValidationError")
def an_order_under_its_id_fails_validation(api: Api, body: dict[str, Any]) -> Request:
    return put_order({**body, "items": [{"sku": "ABC", "qty": 0}]})


@scenario("putOrder", 409, "OrderAlreadyExists")
def the_id_holds_another_order(api: Api, body: dict[str, Any]) -> Request:
    assert send(api, put_order(body), key="placed").status_code == 201
    return put_order({**body, "customerId": "someone-else"})


@scenario("putOrder", 412, "PreconditionFailed")
def the_id_holds_an_order_of_another_tag(api: Api, body: dict[str, Any]) -> Request:
    assert send(api, put_order(body), key="placed").status_code == 201
    return put_order(body, **{"If-Match": STALE_TAG})


@scenario("putOrder", 422, "UnknownSku")
def an_order_under_its_id_of_an_unknown_sku(api: Api, body: dict[str, Any]) -> Request:
    return put_order({**body, "items": [{"sku": "NOPE", "qty": 1}]})


@scenario("putOrder", 422, "CurrencyMismatch")
def an_order_under_its_id_of_an_item_priced_in_dollars(api: Api, body: dict[str, Any]) -> Request:
    return put_order({**body, "items": [{"sku": "USD1", "qty": 1}], "currency": "RUB"})


@scenario("putOrder", 500, "InternalError")
def an_order_under_its_id_the_database_refuses(api: Api, body: dict[str, Any]) -> Request:
    refuse_rows(Order, "false")
    return put_order(body)


# cancelOrder


@scenario("cancelOrder", 200)
def a_pending_order_is_cancelled(api: Api, body: dict[str, Any]) -> Request:
    return cancel_order(place(api, body)["id"], {"reason": "Ordered by mistake."})


@scenario("cancelOrder", 202)
def a_paid_order_is_refunded(api: Api, body: dict[str, Any]) -> Request:
    return cancel_order(place_paid(api, body)["id"])


@scenario("cancelOrder", 400, "ValidationError")
def a_cancel_fails_validation(api: Api, body: dict[str, Any]) -> Request:
    return cancel_order(place(api, body)["id"], {"reason": 42})


@scenario("cancelOrder", 404, "NotFound")
def a_cancel_of_no_order(api: Api, body: dict[str, Any]) -> Request:
    return cancel_order("ord_unknown")


@scenario("cancelOrder", 409, "OrderStateConflict")
def a_cancel_while_a_payment_is_processing(api: Api, body: dict[str, Any]) -> Request:
    order = place(api, body)
    assert api.post("/v1/payments", payment_body(order), key="pay").status_code == 202
    return cancel_order(order["id"])


@scenario("cancelOrder", 412, "PreconditionFailed")
def a_cancel_with_a_stale_tag(api: Api, body: dict[str, Any]) -> Request:
    return cancel_order(place(api, body)["id"], **{"If-Match": STALE_TAG})


@scenario("cancelOrder", 500, "InternalError")
def a_cancel_the_database_refuses(api: Api, body: dict[str, Any]) -> Request:
    order = place(api, body)
    refuse_rows(Order, f"status <> '{Order.Status.CANCELLED}'")
    return cancel_order(order["id"])


# createPayment


@scenario("createPayment", 202)
def a_payment_is_accepted(api: Api, body: dict[str, Any]) -> Request:
    return create_payment(payment_body(place(api, body)))


@scenario("createPayment", 400, "ValidationError")
def a_payment_by_a_method_the_provider_does_not_have(api: Api, body: dict[str, Any]) -> Request:
    return create_payment(payment_body(place(api, body), "pm_bogus"))


@scenario("createPayment", 409, "OrderAlreadyPaid")
def a_payment_of_a_paid_order(api: Api, body: dict[str, Any]) -> Request:
    return create_payment(payment_body(place_paid(api, body)))


@scenario("createPayment", 409, "OrderStateConflict")
def a_payment_of_a_cancelled_order(api: Api, body: dict[str, Any]) -> Request:
    order = place(api, body)
    assert api.post(f"/v1/orders/{order['id']}/cancel", key="cancel").status_code == 200
    return create_payment(payment_body(order))


@scenario("createPayment", 409, "PaymentInProgress")
def a_payment_while_another_is_processing(api: Api, body: dict[str, Any]) -> Request:
    order = place(api, body)
    assert api.post("/v1/payments", payment_body(order), key="first").status_code == 202
    return create_payment(payment_body(order))


@scenario("createPayment", 422, "AmountMismatch")
def a_payment_of_another_amount(api: Api, body: dict[str, Any]) -> Request:
    return create_payment(payment_body(place(api, body), amount=1))


@scenario("createPayment", 422, "CurrencyMismatch")
def a_payment_in_another_currency(api: Api, body: dict[str, Any]) -> Request:
    return create_payment(payment_body(place(api, body), currency="USD"))


@scenario("createPayment", 422, "OrderNotFound")
def a_payment_of_no_order(api: Api, body: dict[str, Any]) -> Request:
    return create_payment(payment_body(place(api, body), orderId="ord_unknown"))


@scenario("createPayment", 500, "InternalError")
def a_payment_whose_operation_the_database_refuses(api: Api, body: dict[str, Any]) -> Request:
    order = place(api, body)
    # Not the payment's row: the service reads any IntegrityError of that
    # insert as another live payment (409 PaymentInProgress).
    refuse_rows(Operation, "false")
    return create_payment(payment_body(order))


# createWebhookEndpoint


@scenario("createWebhookEndpoint", 201)
def an_endpoint_is_subscribed(api: Api, body: dict[str, Any]) -> Request:
    return create_webhook_endpoint(ENDPOINT)


@scenario("createWebhookEndpoint", 400, "ValidationError")
def an_endpoint_on_the_loopback_is_refused(api: Api, body: dict[str, Any]) -> Request:
    return create_webhook_endpoint({**ENDPOINT, "url": "http://127.0.0.1:8080/hooks"})


@scenario("createWebhookEndpoint", 409, "TooManyWebhookEndpoints")
def an_endpoint_past_the_tenants_limit(api: Api, body: dict[str, Any]) -> Request:
    for n in range(16):
        assert send(api, create_webhook_endpoint(ENDPOINT), key=f"full-{n}").status_code == 201
    return create_webhook_endpoint(ENDPOINT)


@scenario("createWebhookEndpoint", 500, "InternalError")
def an_endpoint_the_database_refuses(api: Api, body: dict[str, Any]) -> Request:
    refuse_rows(WebhookEndpoint, "false")
    return create_webhook_endpoint(ENDPOINT)


# disableWebhookEndpoint


def subscribed(api: Api) -> str:
    response = api.post("/v1/webhook-endpoints", ENDPOINT, key="subscribe")
    assert response.status_code == 201, response.content
    endpoint_id: str = body_of(response)["id"]
    return endpoint_id


@scenario("disableWebhookEndpoint", 200)
def an_endpoint_is_disabled(api: Api, body: dict[str, Any]) -> Request:
    return disable_webhook_endpoint(subscribed(api))


@scenario("disableWebhookEndpoint", 400, "ValidationError")
def a_disable_with_a_body_fails_validation(api: Api, body: dict[str, Any]) -> Request:
    return disable_webhook_endpoint(subscribed(api), {"reason": "done"})


@scenario("disableWebhookEndpoint", 404, "NotFound")
def a_disable_of_no_endpoint(api: Api, body: dict[str, Any]) -> Request:
    return disable_webhook_endpoint("whe_unknown")


@scenario("disableWebhookEndpoint", 500, "InternalError")
def a_disable_the_database_refuses(api: Api, body: dict[str, Any]) -> Request:
    endpoint_id = subscribed(api)
    refuse_rows(WebhookEndpoint, "status <> 'disabled'")
    return disable_webhook_endpoint(endpoint_id)


# --- The tests ----------------------------------------------------------------------


@pytest.fixture
def registry() -> Registry:
    """STORED_ANSWERS, complete: the URLconf imports every command's view, and its schema."""
    get_resolver().url_patterns  # noqa: B018 - loading it is the point
    return STORED_ANSWERS


WRITTEN: tuple[type[Model], ...] = (
    Order,
    OrderItem,
    Payment,
    Operation,
    Event,
    WebhookEndpoint,
    Delivery,
    IdempotencyKey,
)


def footprint() -> list[list[dict[str, Any]]]:
    """Every row a command may write (WRITTEN), every column of it."""
    return [list(model._default_manager.order_by("pk").values()) for model in WRITTEN]


def code_of(response: ClientResponse) -> str | None:
    return None if response.status_code < 400 else str(problem(response)["error"])


@pytest.mark.parametrize("case", SCENARIOS, ids=str)
def test_each_stored_answer_is_given_once_then_replayed_under_its_key(
    api: Api,
    order_body: dict[str, Any],
    registry: Registry,
    case: Scenario,
) -> None:
    request = case.arrange(api, order_body)
    assert request.operation_id == case.operation_id
    assert (case.status, case.code) in registry[case.operation_id]

    first = send(api, request, key=KEY)
    after_first = footprint()
    again = send(api, request, key=KEY)

    assert (first.status_code, code_of(first)) == (case.status, case.code), first.content
    assert not first.has_header("Idempotent-Replayed")
    assert IdempotencyKey.objects.get(key=KEY).answer.status == case.status
    assert again.status_code == first.status_code
    assert again["Idempotent-Replayed"] == "true"
    assert again["Content-Type"] == first["Content-Type"]
    assert again.get("Location") == first.get("Location")
    if case.status == 202:
        # The one answer not replayed byte for byte (operations.replay): the
        # ids and links as stored, with the operation's current status.
        operation = Operation.objects.get(pk=body_of(first)["operationId"])
        assert body_of(again) == {**body_of(first), "status": operation.status}
    else:
        assert again.content == first.content
    # The replay executed nothing: no row was written, not even a timestamp.
    assert footprint() == after_first


def documented(registry: Registry) -> set[Answer]:
    return {
        (operation_id, status, code)
        for operation_id, answers in registry.items()
        for status, code in answers
    }


def test_every_documented_stored_answer_has_a_scenario(
    registry: Registry,
) -> None:
    covered = [case.answer for case in SCENARIOS]

    assert len(covered) == len(set(covered)), "two scenarios for one answer"
    assert documented(registry) - set(covered) == set(), "stored answers without a scenario"


def test_every_scenario_is_of_an_answer_the_registry_says_is_stored(
    registry: Registry,
) -> None:
    covered = {case.answer for case in SCENARIOS}

    assert covered - documented(registry) == set(), "scenarios of answers not documented as stored"
