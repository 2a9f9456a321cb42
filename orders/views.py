"""Orders and payments endpoints: each parses its input, makes one domain call, renders.

Their OpenAPI descriptions are in orders/schema.py; the idempotency layer
(``@idempotent_command``) makes every command safe to retry.
"""

import re
from typing import Any

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from api.conditional import IfMatch, conditional_read
from api.pagination import NewestFirstCursorPagination
from idempotency.commands import idempotent_command
from operations.replay import with_current_status
from operations.serializers import polling_headers
from orders import schema, selectors, services
from orders.errors import InvalidOrderId, NoSuchOrder
from orders.links import order_path
from orders.models import ORDER_ID_PATTERN
from orders.rendering import order_command_answer, orders_from_rows
from orders.serializers import (
    CancelOrderInput,
    CreateOrderInput,
    CreatePaymentInput,
    PaymentAcceptedOutput,
    PaymentOutput,
    RefundAcceptedOutput,
    order_etag,
)

ORDER_ID = re.compile(ORDER_ID_PATTERN)
ORDER_ID_RULE = "Must be ord_ followed by 1 to 64 of A-Z, a-z, 0-9, _ and -."


class OrderCollection(APIView):
    @schema.create_order
    @idempotent_command
    def post(self, request: Request) -> Response:
        payload = CreateOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        order = services.create_order(
            tenant=principal_of(request).tenant, new_order=payload.to_new_order()
        )

        return Response(
            order_command_answer(order),
            status=status.HTTP_201_CREATED,
            headers={"Location": order_path(order.id)},
        )

    @schema.list_orders
    def get(self, request: Request) -> Response:
        tenant = principal_of(request).tenant
        paginator = NewestFirstCursorPagination(tenant=tenant.pk)
        page = paginator.paginate_queryset(selectors.order_rows_of(tenant=tenant), request, self)
        # Rows rendered by a plain function, not OrderOutput: see its comment
        # in orders/rendering.py for what that saves.
        relations = selectors.relations_of(orders=page)
        return paginator.get_paginated_response(orders_from_rows(page, relations))


class OrderDetail(APIView):
    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # Any path segment routes here, so that a PUT of an id no client may
        # choose is a 400 that says why rather than a routing 404. Either way
        # it is refused before a command starts or a query runs.
        if not ORDER_ID.fullmatch(kwargs["order_id"]):
            if request.method == "PUT":
                raise InvalidOrderId(details={"orderId": [ORDER_ID_RULE]})
            raise NoSuchOrder("No such order.")

    @schema.get_order
    @conditional_read
    def get(self, request: Request, order_id: str) -> Response:
        order, relations = selectors.order_row(
            tenant=principal_of(request).tenant, order_id=order_id
        )
        # Rendered from the row, as a list page is (orders/rendering.py).
        return Response(orders_from_rows([order], relations)[0])

    @schema.put_order
    @idempotent_command
    def put(self, request: Request, order_id: str) -> Response:
        payload = CreateOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        placement = services.put_order(
            tenant=principal_of(request).tenant,
            order_id=order_id,
            new_order=payload.to_new_order(),
            if_match=IfMatch.of(request, tag_of=order_etag),
        )

        answer = order_command_answer(placement.order)
        if placement.created:
            return Response(
                answer, status=status.HTTP_201_CREATED, headers={"Location": order_path(order_id)}
            )
        return Response(answer)


class OrderCancel(APIView):
    @schema.cancel_order
    @idempotent_command(on_replay=with_current_status)
    def post(self, request: Request, order_id: str) -> Response:
        payload = CancelOrderInput(data=request.data)
        payload.is_valid(raise_exception=True)

        cancellation = services.cancel_order(
            tenant=principal_of(request).tenant,
            order_id=order_id,
            reason=payload.validated_data.get("reason", ""),
            if_match=IfMatch.of(request, tag_of=order_etag),
        )

        if cancellation.refund is not None:
            return Response(
                RefundAcceptedOutput(
                    RefundAcceptedOutput.of(cancellation.order, cancellation.refund)
                ).data,
                status=status.HTTP_202_ACCEPTED,
                headers=polling_headers(cancellation.refund),
            )
        return Response(order_command_answer(cancellation.order))


class PaymentCollection(APIView):
    @schema.create_payment
    @idempotent_command(on_replay=with_current_status)
    def post(self, request: Request) -> Response:
        payload = CreatePaymentInput(data=request.data)
        payload.is_valid(raise_exception=True)

        payment, operation = services.start_payment(
            tenant=principal_of(request).tenant, new_payment=payload.to_new_payment()
        )

        return Response(
            PaymentAcceptedOutput.of(payment, operation),
            status=status.HTTP_202_ACCEPTED,
            headers=polling_headers(operation),
        )


class PaymentDetail(APIView):
    @schema.get_payment
    @conditional_read
    def get(self, request: Request, payment_id: str) -> Response:
        payment = selectors.get_payment(tenant=principal_of(request).tenant, payment_id=payment_id)
        return Response(PaymentOutput(payment).data)
