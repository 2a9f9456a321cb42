"""Request and response shapes of the orders API (camelCase on the wire)."""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.conditional import entity_tag_of
from api.fields import StrictCharField, StrictIntegerField, StrictSerializer
from api.parsers import MAX_SAFE_INTEGER
from api.shared_fields import SharedFields
from operations.models import Operation
from operations.serializers import operation_path
from orders.inputs import NewOrder, NewPayment, OrderLine
from orders.links import order_path, payment_path
from orders.models import ORDER_ID_MAX_LENGTH, Order, OrderItem, Payment
from provider.configured import get_gateway

MAX_ITEMS = 100
MAX_QTY = 1000


class OrderLineInput(SharedFields, StrictSerializer):
    sku = StrictCharField(max_length=64)
    qty = StrictIntegerField(min_value=1, max_value=MAX_QTY)


class CreateOrderInput(SharedFields, StrictSerializer):
    customerId = StrictCharField(max_length=100)
    items: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=OrderLineInput(), allow_empty=False, max_length=MAX_ITEMS
    )
    currency = serializers.RegexField(
        r"^[A-Z]{3}$", error_messages={"invalid": "Must be an ISO 4217 code such as RUB."}
    )

    def to_new_order(self) -> NewOrder:
        data = self.validated_data
        return NewOrder(
            customer_id=data["customerId"],
            currency=data["currency"],
            items=[OrderLine(sku=line["sku"], qty=line["qty"]) for line in data["items"]],
        )


class CancelOrderInput(StrictSerializer):
    reason = StrictCharField(max_length=500, required=False, allow_blank=True)


# Answers state the bounds the service holds them to, so that a generated
# example (Swagger UI's, a fuzzer's) looks like an answer: the model's column
# types alone would document a quantity of up to 2^31 and amounts of 2^63.
class OrderItemOutput(serializers.ModelSerializer[OrderItem]):
    qty = serializers.IntegerField(min_value=1, max_value=MAX_QTY)
    unitPrice = serializers.IntegerField(source="unit_price")
    lineTotal = serializers.IntegerField(source="line_total")

    class Meta:
        model = OrderItem
        fields = ["sku", "qty", "unitPrice", "lineTotal"]


class OrderLinksOutput(serializers.Serializer[Any]):
    self = serializers.CharField(help_text="The order.")


class OrderOutput(serializers.ModelSerializer[Order]):
    customerId = serializers.CharField(source="customer_id")
    totalAmount = serializers.IntegerField(source="total_amount")
    items = OrderItemOutput(many=True, source="lines")
    payments = serializers.SerializerMethodField()
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")
    links = serializers.SerializerMethodField()

    class Meta:
        model = Order
        fields = [
            "id",
            "customerId",
            "status",
            "currency",
            "totalAmount",
            "items",
            "payments",
            "createdAt",
            "updatedAt",
            "links",
        ]

    def get_payments(self, order: Order) -> list[str]:
        return order.payment_ids

    @extend_schema_field(OrderLinksOutput)
    def get_links(self, order: Order) -> dict[str, Any]:
        return {"self": order_path(order.id)}


class OrderCommandOutput(serializers.Serializer[Any]):
    """The answer to a synchronous order command: ``{"status", "orderId", "order", "links"}``."""

    status = serializers.ChoiceField(choices=["succeeded"])
    orderId = serializers.CharField(source="order.id")
    order = OrderOutput()
    links = OrderLinksOutput()

    @staticmethod
    def of(order: Order) -> dict[str, Any]:
        return {"status": "succeeded", "order": order, "links": {"self": order_path(order.id)}}


def order_etag(order: Order) -> str:
    """The ETag a read of the order (``GET /v1/orders/{id}``) answers as it is now."""
    return entity_tag_of(OrderOutput(order).data)


class PaymentMethodField(serializers.ChoiceField):
    """One of the configured payment provider's methods: an enum in the schema.

    The choices are read from the gateway whenever they are read, not when
    the field is built (its serializer's fields are built once,
    api/shared_fields.py), so validation and the schema both follow
    ``PAYMENT_GATEWAY``. A refusal is a ``400 ValidationError``: the body is
    well-formed but not valid, a final answer that is stored and replayed
    like any other, and no payment is recorded.
    """

    default_error_messages = {"invalid_choice": "Not a payment method of this provider: {methods}."}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=[], **kwargs)

    @property
    def choices(self) -> dict[str, str]:
        return dict(get_gateway().payment_methods.items())

    @choices.setter
    def choices(self, _: Any) -> None:
        """DRF's ``__init__`` sets them; they are the gateway's, read above."""

    def to_internal_value(self, data: Any) -> str:
        # The refusal names the methods rather than echoing the value: it is
        # stored with the key, and a client may send a megabyte of it.
        if not isinstance(data, str) or data not in self.choices:
            self.fail("invalid_choice", methods=", ".join(self.choices))
        return data


class CreatePaymentInput(SharedFields, StrictSerializer):
    orderId = StrictCharField(max_length=ORDER_ID_MAX_LENGTH)
    amount = StrictIntegerField(min_value=1)
    currency = serializers.RegexField(
        r"^[A-Z]{3}$", error_messages={"invalid": "Must be an ISO 4217 code such as RUB."}
    )
    paymentMethod = PaymentMethodField(
        help_text=(
            "How the customer pays: one of the payment provider's methods, listed below "
            "(with the built-in simulator, test cards). Any other value is refused with `400 "
            "ValidationError` naming `paymentMethod` in `details`, stored and replayed "
            "like any final answer; it never reaches the provider."
        )
    )

    def to_new_payment(self) -> NewPayment:
        data = self.validated_data
        return NewPayment(
            order_id=data["orderId"],
            amount=data["amount"],
            currency=data["currency"],
            payment_method=data["paymentMethod"],
        )


class PaymentLinksOutput(serializers.Serializer[Any]):
    self = serializers.CharField(help_text="The payment.")
    order = serializers.CharField(help_text="The order it pays.")


class PaymentOutput(serializers.ModelSerializer[Payment]):
    orderId = serializers.CharField(source="order.id")
    amount = serializers.IntegerField(min_value=1, max_value=MAX_SAFE_INTEGER)
    failureCode = serializers.SerializerMethodField()
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")
    links = serializers.SerializerMethodField()

    class Meta:
        model = Payment
        fields = [
            "id",
            "orderId",
            "amount",
            "currency",
            "status",
            "failureCode",
            "createdAt",
            "updatedAt",
            "links",
        ]

    def get_failureCode(self, payment: Payment) -> str | None:
        return payment.failure_code or None

    @extend_schema_field(PaymentLinksOutput)
    def get_links(self, payment: Payment) -> dict[str, str]:
        return {"self": payment_path(payment.id), "order": order_path(payment.order.id)}


class AcceptedLinksOutput(serializers.Serializer[Any]):
    self = serializers.CharField(help_text="What the command is about: the payment, or the order.")
    operation = serializers.CharField(help_text="The operation to poll.")


class PaymentAcceptedOutput(serializers.Serializer[Any]):
    """The answer to POST /v1/payments: the payment and the operation charging it."""

    status = serializers.ChoiceField(choices=Operation.Status.choices)
    paymentId = serializers.CharField()
    operationId = serializers.CharField()
    links = AcceptedLinksOutput()

    @staticmethod
    def of(payment: Payment, operation: Operation) -> dict[str, Any]:
        """The answer itself, every value as the wire has it: the view renders it as it is.

        Through the serializer, building its fields cost every payment Python
        for the same dict (docs/SCALING.md, "Where a create's Python went");
        tests/orders/test_rendering.py holds the two equal.
        """
        return {
            "status": str(operation.status),
            "paymentId": payment.id,
            "operationId": operation.id,
            "links": {"self": payment_path(payment.id), "operation": operation_path(operation.id)},
        }


class RefundAcceptedOutput(serializers.Serializer[Any]):
    """The answer to cancelling a paid order: the order and the refund operation."""

    status = serializers.ChoiceField(choices=Operation.Status.choices)
    orderId = serializers.CharField()
    operationId = serializers.CharField()
    links = AcceptedLinksOutput()

    @staticmethod
    def of(order: Order, operation: Operation) -> dict[str, Any]:
        return {
            "status": operation.status,
            "orderId": order.id,
            "operationId": operation.id,
            "links": {"self": order_path(order.id), "operation": operation_path(operation.id)},
        }
