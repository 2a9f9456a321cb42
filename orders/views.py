"""Orders endpoints. Each view parses input, makes one domain call, renders output."""

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.pagination import NewestFirstCursorPagination
from idempotency.commands import idempotent_command
from orders import services
from orders.selectors import get_order, orders_of
from orders.serializers import (
    CancelOrderInput,
    CreateOrderInput,
    OrderCommandOutput,
    OrderOutput,
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
    @idempotent_command
    def post(self, request: Request, order_id: str) -> Response:
        payload = CancelOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        order = services.cancel_order(
            tenant=request.user.tenant,
            order_id=order_id,
            reason=payload.validated_data.get("reason", ""),
        )

        return Response(OrderCommandOutput(OrderCommandOutput.of(order)).data)
