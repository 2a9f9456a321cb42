"""Serializer fields that take JSON types at their word.

DRF's fields coerce: ``CharField`` turns ``123`` into ``"123"`` and
``IntegerField`` turns ``"5"`` into ``5``. For a command that is replayed
from a fingerprint of its body, a request means what its JSON says, so a
string must be a string and an integer a number with no fraction (``2.0``
is the integer 2, as in the fingerprint).
"""

from typing import Any

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "Must be an integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not data.is_integer():
            self.fail("invalid")
        return super().to_internal_value(int(data))


class StrictSerializer(serializers.Serializer):
    """A serializer that refuses members it does not know (typos included)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and (unknown := sorted(set(data) - set(self.fields))):
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)
