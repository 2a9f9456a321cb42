"""Orders and payments endpoints. Each view parses input, makes one domain call, renders output."""

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.pagination import NewestFirstCursorPagination
from idempotency.commands import idempotent_command
from operations.replay import with_current_status
from operations.serializers import polling_headers
from orders import payments, services
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
    @idempotent_command
    def post(self, request: Request) -> Response:
        payload = CreateOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        order = services.create_order(tenant=request.user.tenant, new_order=payload.to_new_order())

        return Response(
            OrderCommandOutput(OrderCommandOutput.of(order)).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": order_path(order.id)},
        )

    def get(self, request: Request) -> Response:
        paginator = NewestFirstCursorPagination()
        page = paginator.paginate_queryset(orders_of(tenant=request.user.tenant), request, self)
        return paginator.get_paginated_response(OrderOutput(page, many=True).data)


class OrderDetail(APIView):
    def get(self, request: Request, order_id: str) -> Response:
        order = get_order(tenant=request.user.tenant, order_id=order_id)
        return Response(OrderOutput(order).data)


class OrderCancel(APIView):
    @idempotent_command(on_replay=with_current_status)
    def post(self, request: Request, order_id: str) -> Response:
        payload = CancelOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        cancellation = services.cancel_order(
            tenant=request.user.tenant,
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
    @idempotent_command(on_replay=with_current_status)
    def post(self, request: Request) -> Response:
        payload = CreatePaymentInput(data=request.data)
        payload.is_valid(raise_exception=True)

        payment, operation = payments.start_payment(
            tenant=request.user.tenant, new_payment=payload.to_new_payment()
        )

        return Response(
            PaymentAcceptedOutput(PaymentAcceptedOutput.of(payment, operation)).data,
            status=status.HTTP_202_ACCEPTED,
            headers=polling_headers(operation),
        )


class PaymentDetail(APIView):
    def get(self, request: Request, payment_id: str) -> Response:
        payment = get_payment(tenant=request.user.tenant, payment_id=payment_id)
        return Response(PaymentOutput(payment).data)
