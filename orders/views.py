"""Orders and payments endpoints. Each view parses input, makes one domain call, renders output."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from config.openapi import (
    CURSOR,
    INVALID_LIST_QUERY,
    PAGE_SIZE,
    Refusal,
    command_schema,
    cursor_page,
    not_found,
    path_id,
    read_schema,
    validation_error,
)
from config.pagination import NewestFirstCursorPagination
from idempotency.commands import idempotent_command
from operations.replay import with_current_status
from operations.serializers import polling_headers
from orders import payments, services
from orders.errors import CurrencyMismatch, OrderStateConflict, UnknownSku
from orders.selectors import get_order, get_payment, orders_of
from orders.serializers import (
    CancelOrderInput,
    CreateOrderInput,
    CreatePaymentInput,
    OrderCommandOutput,
    OrderOutput,
    PaymentAcceptedOutput,
    PaymentOutput,
    RefundAcceptedOutput,
    order_path,
)


class OrderCollection(APIView):
    @command_schema(
        operation_id="createOrder",
        summary="Place an order",
        description="Prices every line from the catalog; the order starts `pending`.",
        tag="orders",
        request=CreateOrderInput,
        responses={201: OpenApiResponse(OrderCommandOutput, "The order was placed.")},
        invalid=validation_error(
            CreateOrderInput,
            {"customerId": "cust-42", "items": [{"sku": "ABC", "qty": 1001}], "currency": "RUB"},
        ),
        refusals=[
            Refusal(
                UnknownSku("Unknown SKU: NOPE.", details={"unknownSkus": ["NOPE"]}),
                "an item's SKU is not in the catalog.",
            ),
            Refusal(
                CurrencyMismatch(
                    "Not priced in RUB: USD1.", details={"skus": ["USD1"], "currency": "RUB"}
                ),
                "an item is priced in another currency than the order's.",
            ),
        ],
        location=(201, "the new order"),
        examples=[
            OpenApiExample(
                "Two of ABC",
                value={
                    "customerId": "cust-42",
                    "items": [{"sku": "ABC", "qty": 2}],
                    "currency": "RUB",
                },
                request_only=True,
            )
        ],
    )
    @idempotent_command
    def post(self, request: Request) -> Response:
        payload = CreateOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        order = services.create_order(
            tenant=principal_of(request).tenant, new_order=payload.to_new_order()
        )

        return Response(
            OrderCommandOutput(OrderCommandOutput.of(order)).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": order_path(order.id)},
        )

    @read_schema(
        operation_id="listOrders",
        summary="List orders",
        description="The tenant's orders, newest first, cursor-paginated.",
        tag="orders",
        response=OpenApiResponse(cursor_page(OrderOutput, "OrderPage"), "A page of orders."),
        refusals=[INVALID_LIST_QUERY],
        parameters=[CURSOR, PAGE_SIZE],
    )
    def get(self, request: Request) -> Response:
        paginator = NewestFirstCursorPagination()
        page = paginator.paginate_queryset(
            orders_of(tenant=principal_of(request).tenant), request, self
        )
        return paginator.get_paginated_response(OrderOutput(page, many=True).data)


class OrderDetail(APIView):
    @read_schema(
        operation_id="getOrder",
        summary="Read an order",
        description="The order with its lines and the ids of its payments.",
        tag="orders",
        response=OpenApiResponse(OrderOutput, "The order."),
        refusals=[not_found("order", "ord_3k9x0c2m5q8w1e4r7t6y0u2i9")],
        parameters=[path_id("order_id", "ord")],
    )
    def get(self, request: Request, order_id: str) -> Response:
        order = get_order(tenant=principal_of(request).tenant, order_id=order_id)
        return Response(OrderOutput(order).data)


class OrderCancel(APIView):
    @command_schema(
        operation_id="cancelOrder",
        summary="Cancel an order",
        description=(
            "A pending order is cancelled at once (`200`). A paid order is refunded "
            "through the payment provider: `202` with the refund operation to poll; the "
            "order becomes `cancelled` when the refund succeeds. Cancelling a cancelled "
            "order answers `200` with it, whatever the key."
        ),
        tag="orders",
        request=CancelOrderInput,
        responses={
            200: OpenApiResponse(OrderCommandOutput, "The order is cancelled."),
            202: OpenApiResponse(RefundAcceptedOutput, "The order's refund is under way."),
        },
        invalid=validation_error(CancelOrderInput, {"reason": 42}),
        refusals=[
            not_found("order", "ord_3k9x0c2m5q8w1e4r7t6y0u2i9"),
            Refusal(
                OrderStateConflict("A payment of this order is processing; retry when it ends."),
                "a payment of the order is processing.",
            ),
        ],
        location=(202, "the refund operation"),
        path_parameters=[path_id("order_id", "ord")],
        examples=[
            OpenApiExample(
                "With a reason", value={"reason": "Ordered by mistake."}, request_only=True
            )
        ],
    )
    @idempotent_command(on_replay=with_current_status)
    def post(self, request: Request, order_id: str) -> Response:
        payload = CancelOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        cancellation = services.cancel_order(
            tenant=principal_of(request).tenant,
            order_id=order_id,
            reason=payload.validated_data.get("reason", ""),
        )

        if cancellation.refund is not None:
            return Response(
                RefundAcceptedOutput(
                    RefundAcceptedOutput.of(cancellation.order, cancellation.refund)
                ).data,
                status=status.HTTP_202_ACCEPTED,
                headers=polling_headers(cancellation.refund),
            )
        return Response(OrderCommandOutput(OrderCommandOutput.of(cancellation.order)).data)


class PaymentCollection(APIView):
    @command_schema(
        operation_id="createPayment",
        summary="Pay an order",
        description=(
            "Validated at once, then charged by a worker: `202` with the payment and the "
            "operation to poll. A retry with the same key answers the same ids with the "
            "operation's current `status`. The order can have one live payment: a second "
            "charge is refused whatever its key."
        ),
        tag="payments",
        request=CreatePaymentInput,
        responses={202: OpenApiResponse(PaymentAcceptedOutput, "The payment is processing.")},
        invalid=validation_error(
            CreatePaymentInput,
            {
                "orderId": "ord_3k9x0c2m5q8w1e4r7t6y0u2i9",
                "amount": "3980",
                "currency": "RUB",
                "paymentMethod": "pm_card_ok",
            },
        ),
        refusals=[
            Refusal(
                payments.OrderAlreadyPaid(),
                "the order is paid already.",
            ),
            Refusal(
                OrderStateConflict("A cancelled order cannot be paid."),
                "the order is cancelled.",
            ),
            Refusal(payments.PaymentInProgress(), "another payment of the order is processing."),
            Refusal(
                payments.AmountMismatch(details={"totalAmount": 3980}),
                "the amount is not the order's `totalAmount`.",
            ),
            Refusal(
                CurrencyMismatch("The order is in RUB.", details={"currency": "RUB"}),
                "the currency is not the order's.",
            ),
            Refusal(
                payments.OrderNotFound(details={"orderId": "ord_3k9x0c2m5q8w1e4r7t6y0u2i9"}),
                "the `orderId` names no order of your tenant.",
            ),
        ],
        location=(202, "the operation charging the payment"),
        examples=[
            OpenApiExample(
                "A card that pays",
                value={
                    "orderId": "ord_3k9x0c2m5q8w1e4r7t6y0u2i9",
                    "amount": 3980,
                    "currency": "RUB",
                    "paymentMethod": "pm_card_ok",
                },
                request_only=True,
            )
        ],
    )
    @idempotent_command(on_replay=with_current_status)
    def post(self, request: Request) -> Response:
        payload = CreatePaymentInput(data=request.data)
        payload.is_valid(raise_exception=True)

        payment, operation = payments.start_payment(
            tenant=principal_of(request).tenant, new_payment=payload.to_new_payment()
        )

        return Response(
            PaymentAcceptedOutput(PaymentAcceptedOutput.of(payment, operation)).data,
            status=status.HTTP_202_ACCEPTED,
            headers=polling_headers(operation),
        )


class PaymentDetail(APIView):
    @read_schema(
        operation_id="getPayment",
        summary="Read a payment",
        description="A declined payment is `failed` with its `failureCode`.",
        tag="payments",
        response=OpenApiResponse(PaymentOutput, "The payment."),
        refusals=[not_found("payment", "pay_8d2k4n6p0r1t3v5x7z9b2c4e6")],
        parameters=[path_id("payment_id", "pay")],
    )
    def get(self, request: Request, payment_id: str) -> Response:
        payment = get_payment(tenant=principal_of(request).tenant, payment_id=payment_id)
        return Response(PaymentOutput(payment).data)
