"""The types of event, as the apps that emit them register them.

The events app stores, lists and delivers events it knows nothing about:
each type is registered, when its app loads, with the serializer of its
``data`` (the resource as its read endpoint shows it), which the schema
documents and the feed's ``type=`` accepts::

    events.registry.register(
        "order.created", data=OrderOutput, description="An order was placed."
    )

So the dependency points one way: the domain imports events, never the
reverse.
"""

from dataclasses import dataclass
from typing import Any

from rest_framework import serializers


@dataclass(frozen=True)
class EventType:
    name: str
    # The serializer of its data: the resource's read representation.
    data: type[serializers.Serializer[Any]]
    # When it happens, for the schema and the docs.
    description: str


_types: dict[str, EventType] = {}


def register(name: str, *, data: type[serializers.Serializer[Any]], description: str) -> None:
    if name in _types and _types[name].data is not data:
        raise ValueError(f"Event type {name!r} is registered twice.")
    _types[name] = EventType(name=name, data=data, description=description)


def require(name: str) -> None:
    """Refuse to record an event of a type no app registered.

    A type recorded but not registered would be delivered and listed, yet
    missing from the schema and refused by the feed's ``type=`` filter: the
    omission fails the first test that makes its effect.

    :raises LookupError: ``name`` is not registered.
    """
    if name not in _types:
        raise LookupError(f"Event type {name!r} is not registered (events.registry.register).")


def types() -> list[str]:
    """Every registered type, in registration order (the schema's enum, the feed's filter)."""
    return list(_types)


def registrations() -> list[EventType]:
    return list(_types.values())
