"""How the events and webhooks API is described in the OpenAPI schema.

The webhook request itself, what a consumer's endpoint receives, is a
callback of ``createWebhookEndpoint``: its headers and its body, an
``Event`` of any registered type.
"""

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import (
    OpenApiCallback,
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)

from api.openapi.parameters import CURSOR, INVALID_LIST_QUERY, PAGE_SIZE, cursor_page, path_id
from api.openapi.problems import Refusal, not_found, validation_error
from api.openapi.reads import read_schema
from events import registry
from events.addresses import LOOKUPS_PER_TENANT, RESOLVE_RETRY_AFTER_SECONDS, RESOLVE_TIMEOUT
from events.errors import TooManyWebhookEndpoints, WebhookHostUnresolved
from events.serializers import (
    CreatedWebhookEndpointOutput,
    CreateWebhookEndpointInput,
    DeliveryOutput,
    DisableWebhookEndpointInput,
    WebhookEndpointOutput,
    event_schema,
)
from idempotency.schema import command_schema

_ENDPOINT_NOT_FOUND = not_found("webhook endpoint", "whe_2n4p6r8t0v2x4z6b8d0f2h4j6")
_ENDPOINT_BODY = {"url": "https://example.com/webhooks/orders", "eventTypes": ["*"]}


list_events = read_schema(
    operation_id="listEvents",
    summary="Read the event feed",
    description=(
        "The tenant's events, **oldest first**: every order placed or cancelled and every "
        "payment that succeeded, failed or was refunded, one event per effect however often "
        "a command was retried. Follow `next` to the end, then poll with `after` set to the "
        "last event you handled: an event appears only once every event before it has, so "
        "a consumer that reads this way misses none. Events are kept at least 30 days "
        "(`EVENT_RETENTION`)."
    ),
    tag="events",
    response=OpenApiResponse(cursor_page(event_schema, "EventPage"), "A page of events."),
    refusals=[INVALID_LIST_QUERY],
    parameters=[
        OpenApiParameter(
            "after",
            type=str,
            description=(
                "An event id (`evt_…`): start after it. One that names no event of yours "
                "(or one purged) is `400 ValidationError`. The page's `next` and `previous` "
                "leave it out: their cursor says where the read is, so a long read goes on "
                "when this event is purged."
            ),
        ),
        OpenApiParameter(
            "type", type=str, enum=registry.types(), description="Only events of this type."
        ),
        CURSOR,
        PAGE_SIZE,
    ],
)


get_event = read_schema(
    operation_id="getEvent",
    summary="Read an event",
    description="One event, as the feed and its webhook deliveries carry it.",
    tag="events",
    response=OpenApiResponse(event_schema(), "The event."),
    refusals=[not_found("event", "evt_7c9e1g3i5k7m9o1q3s5u7w9y1")],
    parameters=[path_id("event_id", "evt")],
)


_WEBHOOK_REQUEST = OpenApiCallback(
    "event",
    "{$request.body#/url}",
    extend_schema(
        summary="An event, delivered to your endpoint",
        description=(
            "A `POST` of the event's JSON, the same bytes on every attempt, signed as "
            "Standard Webhooks defines. Verify the signature over "
            "`<webhook-id>.<webhook-timestamp>.<body>` with the endpoint's secret, refuse a "
            "timestamp more than 5 minutes away, and handle each `webhook-id` once: a "
            "delivery is retried until you answer `2xx` (within `WEBHOOK_TIMEOUT`, 10 s), "
            "with backoff (`WEBHOOK_RETRY_BACKOFF`, doubling) up to `WEBHOOK_MAX_ATTEMPTS` "
            "(8) attempts, so you may receive one more than once, and events in any order."
        ),
        request=event_schema(),
        responses={
            200: OpenApiResponse(description="Any `2xx`: delivered; nothing more is sent."),
            500: OpenApiResponse(
                description="Anything else, or no answer in time: the delivery is retried."
            ),
        },
    ),
)


_create_webhook_endpoint = command_schema(
    operation_id="createWebhookEndpoint",
    summary="Subscribe an endpoint to events",
    description=(
        "Every event of the types named is then `POST`ed to the URL (see the callback "
        "`event`). The answer carries the endpoint's `secret`, which no read shows "
        "again: replays of this command answer it too, for the key's retention.\n\n"
        "`400 ValidationError` names `url` when the URL is not `http` or `https`, names a "
        "zone id (`[fe80::1%25eth0]`), its host does not exist, or it is or resolves to a "
        "loopback, private, link-local or multicast address (unless the deployment sets "
        "`WEBHOOK_ALLOW_PRIVATE_URLS`). An IPv6 address that carries an IPv4 one (mapped, "
        "compatible, translated, NAT64 `64:ff9b::/96`, 6to4, Teredo) is judged as that "
        "IPv4 address; NAT64's local-use `64:ff9b:1::/48` is refused. The name is resolved "
        "again at every delivery, and a delivery to such an address is not made.\n\n"
        f"A host that does not resolve within {RESOLVE_TIMEOUT:g} s is the service's "
        f"failure: `503 ServiceUnavailable` with `Retry-After` "
        f"({RESOLVE_RETRY_AFTER_SECONDS}), nothing stored; so is a tenant's creation while "
        f"{LOOKUPS_PER_TENANT} of its host names are still being resolved."
    ),
    tag="webhooks",
    request=CreateWebhookEndpointInput,
    responses={201: OpenApiResponse(CreatedWebhookEndpointOutput, "The endpoint is enabled.")},
    invalid=validation_error(
        CreateWebhookEndpointInput, {"url": "ftp://example.com", "eventTypes": []}
    ),
    refusals=[
        Refusal(
            TooManyWebhookEndpoints(
                "A tenant has at most 16 enabled webhook endpoints: disable one first."
            ),
            "the tenant has `WEBHOOK_ENDPOINTS_PER_TENANT` (16) enabled endpoints already: "
            "disable one first.",
        )
    ],
    location=(201, "the new endpoint"),
    examples=[OpenApiExample("Every event", value=_ENDPOINT_BODY, request_only=True)],
    unavailable=[
        Refusal(
            WebhookHostUnresolved(
                f"The host did not resolve within {RESOLVE_TIMEOUT:g} s. Retry after the "
                "number of seconds in Retry-After.",
                retry_after=RESOLVE_RETRY_AFTER_SECONDS,
            ),
            f"the URL's host did not resolve within {RESOLVE_TIMEOUT:g} s, or "
            f"{LOOKUPS_PER_TENANT} of the tenant's host names are still being resolved. "
            f"Retry after `Retry-After` seconds ({RESOLVE_RETRY_AFTER_SECONDS}).",
        )
    ],
)


# The delivery's headers. drf-spectacular writes no parameters for a
# callback's operation, so a post-processing hook adds them
# (SPECTACULAR_SETTINGS).
WEBHOOK_HEADERS = [
    {
        "in": "header",
        "name": "webhook-id",
        "required": True,
        "schema": {"type": "string"},
        "description": "The event's id, `evt_…`: the same on every attempt. Deduplicate by it.",
    },
    {
        "in": "header",
        "name": "webhook-timestamp",
        "required": True,
        "schema": {"type": "integer"},
        "description": "When this attempt was signed, in Unix seconds.",
    },
    {
        "in": "header",
        "name": "webhook-signature",
        "required": True,
        "schema": {"type": "string"},
        "description": (
            "`v1,` and the base64 of HMAC-SHA256 over `<webhook-id>.<webhook-timestamp>.<body>`, "
            "keyed by the base64-decoded part of the secret after `whsec_`."
        ),
    },
]


def add_webhook_headers(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A post-processing hook: the Standard Webhooks headers on the delivery's callback."""
    command = result["paths"]["/v1/webhook-endpoints"]["post"]
    for path_item in command["callbacks"]["event"].values():
        path_item["post"]["parameters"] = WEBHOOK_HEADERS
    return result


def create_webhook_endpoint(view: Callable[..., Any]) -> Callable[..., Any]:
    """The command's schema, and the request its endpoint will receive (a callback)."""
    return extend_schema(callbacks=[_WEBHOOK_REQUEST])(_create_webhook_endpoint(view))


list_webhook_endpoints = read_schema(
    operation_id="listWebhookEndpoints",
    summary="List webhook endpoints",
    description="The tenant's endpoints, newest first, without their secrets.",
    tag="webhooks",
    response=OpenApiResponse(
        cursor_page(WebhookEndpointOutput, "WebhookEndpointPage"), "A page of endpoints."
    ),
    refusals=[INVALID_LIST_QUERY],
    parameters=[CURSOR, PAGE_SIZE],
)


get_webhook_endpoint = read_schema(
    operation_id="getWebhookEndpoint",
    summary="Read a webhook endpoint",
    description="The endpoint, without its secret.",
    tag="webhooks",
    response=OpenApiResponse(WebhookEndpointOutput, "The endpoint."),
    refusals=[_ENDPOINT_NOT_FOUND],
    parameters=[path_id("endpoint_id", "whe")],
)


disable_webhook_endpoint = command_schema(
    operation_id="disableWebhookEndpoint",
    summary="Disable a webhook endpoint",
    description=(
        "Nothing more is delivered to it: its pending deliveries end `failed`. Disabling a "
        "disabled endpoint answers `200` with it. A disabled endpoint is kept as long as "
        "events are (`EVENT_RETENTION`, 30 days) and its deliveries, then forgotten: its "
        "id is then `404`."
    ),
    tag="webhooks",
    request=None,
    responses={200: OpenApiResponse(WebhookEndpointOutput, "The endpoint is disabled.")},
    invalid=validation_error(DisableWebhookEndpointInput, {"reason": "no body is taken"}),
    refusals=[_ENDPOINT_NOT_FOUND],
    path_parameters=[path_id("endpoint_id", "whe")],
)


list_deliveries = read_schema(
    operation_id="listWebhookDeliveries",
    summary="List an endpoint's deliveries",
    description=(
        "Newest first: each event's delivery to this endpoint, with its attempts and what "
        "the last one got (`lastStatusCode`, or `lastError` when no answer came)."
    ),
    tag="webhooks",
    response=OpenApiResponse(cursor_page(DeliveryOutput, "DeliveryPage"), "A page of deliveries."),
    refusals=[INVALID_LIST_QUERY, _ENDPOINT_NOT_FOUND],
    parameters=[path_id("endpoint_id", "whe"), CURSOR, PAGE_SIZE],
)
