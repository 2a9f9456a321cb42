"""Events and webhook endpoints: each parses its input, makes one call, renders.

Their OpenAPI descriptions are in events/schema.py; the idempotency layer
(``@idempotent_command``) makes every command safe to retry.
"""

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from api.pagination import NewestFirstCursorPagination
from events import schema, selectors, services
from events.links import webhook_endpoint_path
from events.pagination import OldestFirstCursorPagination
from events.rendering import event_of
from events.serializers import (
    CreatedWebhookEndpointOutput,
    CreateWebhookEndpointInput,
    DeliveryOutput,
    DisableWebhookEndpointInput,
    WebhookEndpointOutput,
)
from idempotency.commands import idempotent_command


class EventCollection(APIView):
    @schema.list_events
    def get(self, request: Request) -> Response:
        tenant, type = principal_of(request).tenant, request.query_params.get("type")
        events = selectors.feed_of(
            tenant=tenant, type=type, after=request.query_params.get("after")
        )
        # `after` is no part of the list: it says where to start, as a cursor
        # does, and a cursor's position is past it.
        paginator = OldestFirstCursorPagination(tenant=tenant.pk, scope={"type": type})
        page = paginator.paginate_queryset(events, request, self)
        return paginator.get_paginated_response([event_of(event) for event in page])


class EventDetail(APIView):
    @schema.get_event
    def get(self, request: Request, event_id: str) -> Response:
        event = selectors.get_event(tenant=principal_of(request).tenant, event_id=event_id)
        return Response(event_of(event))


class WebhookEndpointCollection(APIView):
    @schema.create_webhook_endpoint
    @idempotent_command
    def post(self, request: Request) -> Response:
        payload = CreateWebhookEndpointInput(data=request.data)
        payload.is_valid(raise_exception=True)

        endpoint = services.create_endpoint(
            tenant=principal_of(request).tenant, new_endpoint=payload.to_new_endpoint()
        )

        return Response(
            CreatedWebhookEndpointOutput(endpoint).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": webhook_endpoint_path(endpoint.id)},
        )

    @schema.list_webhook_endpoints
    def get(self, request: Request) -> Response:
        tenant = principal_of(request).tenant
        paginator = NewestFirstCursorPagination(tenant=tenant.pk)
        page = paginator.paginate_queryset(selectors.endpoints_of(tenant=tenant), request, self)
        return paginator.get_paginated_response(WebhookEndpointOutput(page, many=True).data)


class WebhookEndpointDetail(APIView):
    @schema.get_webhook_endpoint
    def get(self, request: Request, endpoint_id: str) -> Response:
        endpoint = selectors.get_endpoint(
            tenant=principal_of(request).tenant, endpoint_id=endpoint_id
        )
        return Response(WebhookEndpointOutput(endpoint).data)

    @schema.disable_webhook_endpoint
    @idempotent_command
    def delete(self, request: Request, endpoint_id: str) -> Response:
        payload = DisableWebhookEndpointInput(data=request.data or {})
        payload.is_valid(raise_exception=True)

        endpoint = services.disable_endpoint(
            tenant=principal_of(request).tenant, endpoint_id=endpoint_id
        )

        return Response(WebhookEndpointOutput(endpoint).data)


class WebhookDeliveries(APIView):
    @schema.list_deliveries
    def get(self, request: Request, endpoint_id: str) -> Response:
        tenant = principal_of(request).tenant
        deliveries = selectors.deliveries_of(tenant=tenant, endpoint_id=endpoint_id)
        # The endpoint is in the path, and so in the list's identity.
        paginator = NewestFirstCursorPagination(tenant=tenant.pk)
        page = paginator.paginate_queryset(deliveries, request, self)
        return paginator.get_paginated_response(DeliveryOutput(page, many=True).data)
