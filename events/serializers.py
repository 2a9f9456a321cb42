"""Request and response shapes of the events and webhooks API (camelCase on the wire)."""

from functools import cache
from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from api.fields import StrictCharField, StrictSerializer
from events import registry
from events.links import deliveries_path, webhook_endpoint_path
from events.models import Delivery, WebhookEndpoint
from events.services import NewEndpoint

MAX_URL_LENGTH = 2048
ALL_TYPES = "*"


class EventTypeField(serializers.ChoiceField):
    """A registered event type, or ``*``; the choices are read when a serializer is made."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=[*registry.types(), ALL_TYPES], **kwargs)


class CreateWebhookEndpointInput(StrictSerializer):
    url = StrictCharField(
        max_length=MAX_URL_LENGTH,
        help_text=(
            "Where to `POST` the events: an `http` or `https` URL whose host is, and "
            "resolves to, a public address (unless the deployment sets "
            "`WEBHOOK_ALLOW_PRIVATE_URLS`); no credentials, no fragment."
        ),
    )
    eventTypes: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=EventTypeField(),
        allow_empty=False,
        max_length=16,
        help_text='The types it receives, or `["*"]` for every type.',
    )

    def to_new_endpoint(self) -> NewEndpoint:
        data = self.validated_data
        types = data["eventTypes"]
        return NewEndpoint(
            url=data["url"], event_types=[ALL_TYPES] if ALL_TYPES in types else types
        )


class WebhookEndpointLinksOutput(serializers.Serializer[Any]):
    self = serializers.CharField(help_text="The endpoint.")
    deliveries = serializers.CharField(help_text="Its deliveries, newest first.")


class WebhookEndpointOutput(serializers.ModelSerializer[WebhookEndpoint]):
    url = serializers.CharField(max_length=MAX_URL_LENGTH)
    eventTypes = serializers.ListField(source="event_types", child=serializers.CharField())
    createdAt = serializers.DateTimeField(source="created_at")
    links = serializers.SerializerMethodField()

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "eventTypes", "status", "createdAt", "links"]

    @extend_schema_field(WebhookEndpointLinksOutput)
    def get_links(self, endpoint: WebhookEndpoint) -> dict[str, str]:
        return {
            "self": webhook_endpoint_path(endpoint.id),
            "deliveries": deliveries_path(endpoint.id),
        }


class CreatedWebhookEndpointOutput(WebhookEndpointOutput):
    """The answer to creating an endpoint: the one place its secret is shown."""

    secret = serializers.CharField(
        help_text=(
            "`whsec_` and the base64 of 32 bytes: the key of every delivery's "
            "`webhook-signature`. Shown here and in this command's replays only; keep it."
        )
    )

    class Meta(WebhookEndpointOutput.Meta):
        fields = [*WebhookEndpointOutput.Meta.fields, "secret"]


class DeliveryOutput(serializers.ModelSerializer[Delivery]):
    eventId = serializers.CharField(source="event.id")
    type = serializers.CharField(source="event.type")
    lastStatusCode = serializers.IntegerField(
        source="last_status_code", allow_null=True, min_value=100, max_value=599
    )
    lastError = serializers.SerializerMethodField()
    nextAttemptAt = serializers.DateTimeField(source="next_attempt_at", allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = Delivery
        fields = [
            "eventId",
            "type",
            "status",
            "attempts",
            "lastStatusCode",
            "lastError",
            "nextAttemptAt",
            "createdAt",
        ]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_lastError(self, delivery: Delivery) -> str | None:
        return delivery.last_error or None


class EventLinksOutput(serializers.Serializer[Any]):
    self = serializers.CharField(help_text="The event.")
    resource = serializers.CharField(help_text="The order or payment it is about.")


def _event_of_type(event_type: registry.EventType) -> type[serializers.Serializer[Any]]:
    """The schema of one type's events: ``type`` that type, ``data`` its resource."""
    name = "".join(part.capitalize() for part in event_type.name.split(".")) + "Event"
    fields: dict[str, Any] = {
        "id": serializers.CharField(help_text="`evt_…`: the `webhook-id` of its deliveries."),
        "type": serializers.ChoiceField(
            choices=[event_type.name], help_text=event_type.description
        ),
        "createdAt": serializers.DateTimeField(),
        "data": event_type.data(
            help_text="The resource as its read endpoint showed it when the event happened."
        ),
        "links": EventLinksOutput(),
        "__doc__": event_type.description,
    }
    return type(name, (serializers.Serializer,), fields)


@cache
def _events_of_each_type() -> dict[
    str, serializers.Serializer[Any] | type[serializers.Serializer[Any]]
]:
    # Made once: each schema component is one class, wherever it is used.
    return {t.name: _event_of_type(t) for t in registry.registrations()}


def event_schema(**kwargs: Any) -> PolymorphicProxySerializer:
    """An event, one of the registered types (``type`` tells which): the schema's ``Event``."""
    return PolymorphicProxySerializer(
        component_name="Event",
        serializers=_events_of_each_type(),
        resource_type_field_name="type",
        **kwargs,
    )


class DisableWebhookEndpointInput(StrictSerializer):
    """A ``DELETE`` takes no body: any member in one is refused."""
