"""docs/SPECIFICATION.md §5: a client generated from the live schema works, with real types.

openapi-python-client generates a package from the schema the running
service serves; the test fails on any warning of the generator, then
drives the service through that package alone: place, replay and conflict,
pay and poll, page through the list with its cursors, refund.

The generated package is unknown to mypy: it is imported by name and its
objects are ``Any``.
"""

import importlib
import io
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from accounts.services import create_api_client
from tests.support.live import BIN, LiveService, serve_with_worker
from tests.support.waits import wait_for

# The generator's post-processing hooks (ruff check and format) only tidy the
# output; without them the test needs no formatter on PATH.
GENERATOR_CONFIG = "post_hooks: []\n"


@pytest.fixture(scope="module")
def client_service(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveService]:
    with serve_with_worker(tmp_path_factory.mktemp("var")) as service:
        yield service


@pytest.fixture(scope="module")
def generated(client_service: LiveService, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The client package generated from the service's schema, imported."""
    root = tmp_path_factory.mktemp("client")
    # A name of its own, so that no other generated package is imported instead.
    package = f"order_service_client_{uuid.uuid4().hex[:8]}"
    config = root / "config.yaml"
    config.write_text(GENERATOR_CONFIG)

    result = subprocess.run(
        [
            str(BIN / "openapi-python-client"),
            "generate",
            "--url",
            client_service.url("/v1/schema/?format=json"),
            "--output-path",
            str(root / package),
            "--meta",
            "none",
            "--config",
            str(config),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "warning" not in output.lower(), output
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(package)
    finally:
        sys.path.remove(str(root))


class Client:
    """The generated package's client, and its endpoints and models by name."""

    def __init__(self, package: Any, service: LiveService, token: str) -> None:
        self.package = package
        self.models: Any = importlib.import_module(f"{package.__name__}.models")
        self.http: Any = package.AuthenticatedClient(
            base_url=service.base_url, token=token, raise_on_unexpected_status=True
        )

    def call(self, tag: str, operation: str, *args: Any, **kwargs: Any) -> Any:
        """``sync_detailed`` of an operation: status, headers, raw body and parsed body."""
        module: Any = importlib.import_module(f"{self.package.__name__}.api.{tag}.{operation}")
        return module.sync_detailed(*args, client=self.http, **kwargs)

    def place(self, key: str, qty: int = 2) -> Any:
        models = self.models
        body = models.CreateOrderInput(
            customer_id="cust-generated",
            items=[models.OrderLineInput(sku="ABC", qty=qty)],
            currency="RUB",
        )
        return self.call("orders", "create_order", body=body, idempotency_key=key)

    def finished(self, operation_id: str) -> Any:
        """Poll an operation until it leaves ``processing``, honouring ``Retry-After`` (bounded)."""
        processing = self.models.OperationStatusEnum.PROCESSING

        def read() -> Any:
            response = self.call("operations", "get_operation", operation_id)
            assert response.status_code == 200, response
            return response.parsed

        # Retry-After (a second) is a client's pace; the worker is quicker.
        return wait_for(
            read,
            lambda operation: operation.status != processing,
            30,
            interval=0.1,
            what=f"operation {operation_id} ending",
        )


@pytest.fixture
def client(generated: Any, client_service: LiveService, transactional_db: None) -> Client:
    # Committed, so that the service's own connections see them.
    call_command("seed_demo", stdout=io.StringIO())
    token = create_api_client(tenant_slug="generated", name="client").token
    return Client(generated, client_service, token)


def test_a_generated_client_places_replays_and_is_told_of_a_conflict(client: Client) -> None:
    models = client.models

    created = client.place("gen-order")
    replayed = client.place("gen-order")
    conflict = client.place("gen-order", qty=3)

    assert created.status_code == 201
    order = created.parsed
    assert isinstance(order, models.OrderCommandOutput)
    assert order.order.total_amount == 3980
    assert order.links.self_ == f"/v1/orders/{order.order_id}"
    assert replayed.status_code == 201
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.content == created.content
    assert conflict.status_code == 409
    assert isinstance(conflict.parsed, models.ConflictProblem)
    assert conflict.parsed.error == models.ConflictProblemErrorEnum.IDEMPOTENCYKEYCONFLICT
    assert conflict.parsed.details.mismatch == ["/items/0/qty"]
    assert conflict.parsed.idempotency_key == "gen-order"


def test_a_generated_client_pays_pages_and_refunds(client: Client) -> None:
    models = client.models
    orders = [client.place(f"gen-page-{i}").parsed for i in range(3)]
    paid = orders[0]
    succeeded = models.OperationStatusEnum.SUCCEEDED

    accepted = client.call(
        "payments",
        "create_payment",
        body=models.CreatePaymentInput(
            order_id=paid.order_id,
            amount=paid.order.total_amount,
            currency=paid.order.currency,
            payment_method=models.PaymentMethodEnum.PM_CARD_OK,
        ),
        idempotency_key="gen-pay",
    )
    charge = client.finished(accepted.parsed.operation_id)
    first = client.call("orders", "list_orders", page_size=2)
    second = client.call("orders", "list_orders", page_size=2, cursor=first.parsed.next_cursor)
    refund = client.call(
        "orders",
        "cancel_order",
        paid.order_id,
        body=models.CancelOrderInput(reason="Generated, then refunded."),
        idempotency_key="gen-cancel",
    )
    refunded = client.finished(refund.parsed.operation_id)
    cancelled = client.call("orders", "get_order", paid.order_id)

    assert accepted.status_code == 202
    assert isinstance(accepted.parsed, models.PaymentAcceptedOutput)
    assert accepted.parsed.links.operation == f"/v1/operations/{accepted.parsed.operation_id}"
    assert charge.status == succeeded
    assert charge.error is None
    assert charge.links.result == f"/v1/payments/{accepted.parsed.payment_id}"
    assert first.status_code == second.status_code == 200
    assert isinstance(first.parsed.next_cursor, str)
    assert second.parsed.next_cursor is None
    listed = [o.id for o in [*first.parsed.results, *second.parsed.results]]
    assert listed == [o.order_id for o in reversed(orders)]
    assert refund.status_code == 202
    assert isinstance(refund.parsed, models.RefundAcceptedOutput)
    assert refunded.status == succeeded
    assert refunded.links.result == f"/v1/orders/{paid.order_id}"
    assert cancelled.parsed.status == models.OrderStatusEnum.CANCELLED
    assert cancelled.parsed.links.self_ == f"/v1/orders/{paid.order_id}"


def test_a_generated_client_chooses_ids_and_sends_entity_tags(client: Client) -> None:
    models = client.models
    body = models.CreateOrderInput(
        customer_id="cust-generated",
        items=[models.OrderLineInput(sku="ABC", qty=2)],
        currency="RUB",
    )

    placed = client.call("orders", "put_order", "ord_generated-1", body=body, idempotency_key="g1")
    again = client.call("orders", "put_order", "ord_generated-1", body=body, idempotency_key="g2")
    read = client.call("orders", "get_order", "ord_generated-1")
    unchanged = client.call(
        "orders", "get_order", "ord_generated-1", if_none_match=read.headers["ETag"]
    )
    stale = client.call(
        "orders",
        "cancel_order",
        "ord_generated-1",
        body=models.CancelOrderInput(),
        idempotency_key="g3",
        if_match='"stale"',
    )
    cancelled = client.call(
        "orders",
        "cancel_order",
        "ord_generated-1",
        body=models.CancelOrderInput(),
        idempotency_key="g4",
        if_match=read.headers["ETag"],
    )

    assert placed.status_code == 201
    assert placed.parsed.order_id == "ord_generated-1"
    assert placed.headers["Location"] == "/v1/orders/ord_generated-1"
    assert again.status_code == 200
    assert again.parsed.order.id == "ord_generated-1"
    assert "Idempotent-Replayed" not in again.headers
    assert unchanged.status_code == 304
    assert unchanged.headers["ETag"] == read.headers["ETag"]
    assert stale.status_code == 412
    assert isinstance(stale.parsed, models.PreconditionFailedProblem)
    assert cancelled.status_code == 200
    assert cancelled.parsed.order.status == models.OrderStatusEnum.CANCELLED
