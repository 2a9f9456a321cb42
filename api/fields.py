"""Serializer fields that take JSON types at their word.

DRF's fields coerce: ``CharField`` turns ``123`` into ``"123"`` and
``IntegerField`` turns ``"5"`` into ``5``. For a command that is replayed
from a fingerprint of its body, a request means what its JSON says, so a
string must be a string and an integer a number with no fraction (``2.0``
is the integer 2, as in the fingerprint).
"""

from typing import Any

from rest_framework import serializers
from rest_framework.settings import api_settings


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


# How many unknown members one object's error names, and how long a name it
# repeats. An error is stored with its key and replayed for a day: a body
# of 60,000 made-up members must not make a 1.7 MB answer of them.
MAX_UNKNOWN_FIELDS_NAMED = 5
MAX_NAMED_FIELD_LENGTH = 64


class StrictSerializer(serializers.Serializer[Any]):
    """A serializer that refuses members it does not know (typos included).

    The error names the first few unknown members (in name order, short
    names only) and counts the rest, so that it stays small whatever the
    body holds.
    """

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and (unknown := sorted(set(data) - set(self.fields))):
            named = [n for n in unknown if len(n) <= MAX_NAMED_FIELD_LENGTH]
            named = named[:MAX_UNKNOWN_FIELDS_NAMED]
            errors: dict[str, list[str]] = {name: ["Unknown field."] for name in named}
            if unnamed := len(unknown) - len(named):
                errors[api_settings.NON_FIELD_ERRORS_KEY] = [
                    f"{unnamed} more unknown field{'s' * (unnamed > 1)}, not listed."
                ]
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)
