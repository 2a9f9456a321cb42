"""An event as the feed shows it and a webhook carries it."""

import json
from typing import Any

from rest_framework import serializers

from events.links import event_path
from events.models import Event

_WIRE_TIME = serializers.DateTimeField()


def event_of(event: Event) -> dict[str, Any]:
    """``{"id", "type", "createdAt", "data", "links"}`` (contract §4)."""
    return {
        "id": event.id,
        "type": event.type,
        "createdAt": _WIRE_TIME.to_representation(event.created_at),
        "data": event.data,
        "links": {"self": event_path(event.id), "resource": event.resource},
    }


def body_of(event: Event) -> bytes:
    """The bytes a delivery of the event posts: the same on every attempt.

    Everything in them is stored, and read back the same way each time;
    they are compact UTF-8, as the API's answers are.
    """
    return json.dumps(event_of(event), ensure_ascii=False, separators=(",", ":")).encode()
