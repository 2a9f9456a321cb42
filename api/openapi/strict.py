"""Input described as strictly as it is validated: drf-spectacular taught the house rules.

:class:`StrictSerializerScheme` amends what drf-spectacular makes of every
:class:`api.fields.StrictSerializer` (:func:`default_serializer_schema`):
no unknown members, lists' and integers' and strings' bounds. Without them
a client generated from the schema (or a fuzzer) would believe that
requests the service refuses are valid.
"""

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from api.parsers import MAX_SAFE_INTEGER


def default_serializer_schema(
    auto_schema: AutoSchema, serializer: serializers.Serializer[Any], direction: Any
) -> dict[str, Any]:
    """The schema drf-spectacular makes of ``serializer`` by itself, for an extension to amend.

    An extension of one exact class gets it from its base,
    ``super().map_serializer()`` (idempotency's ``KeyLinksScheme`` does).
    That base maps the extension's ``target_class``, though, not the
    serializer matched: for an extension of every subclass
    (:class:`StrictSerializerScheme`) it is the base class, without the
    subclass's fields. drf-spectacular has no public call that maps the
    serializer matched, so this is the one caller of its private
    ``AutoSchema._map_basic_serializer``; tests/docs/test_openapi.py pins
    that method's signature and what it makes of a small serializer, so that
    an upgrade that changes it fails there rather than changing the schema.

    :raises AssertionError: ``serializer`` is not a plain serializer (a list
        serializer, say): drf-spectacular's own check.
    """
    schema: dict[str, Any] = auto_schema._map_basic_serializer(serializer, direction)  # noqa: SLF001
    return schema


class StrictSerializerScheme(OpenApiSerializerExtension):
    """Input serializers, described as strictly as they validate.

    Without these constraints a client generated from the schema (or a
    fuzzer) would believe that requests the service refuses are valid.
    """

    target_class = "api.fields.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        serializer = self.target
        schema = default_serializer_schema(auto_schema, serializer, direction)
        # StrictSerializer refuses members it does not know.
        schema["additionalProperties"] = False
        # Its docstring describes the base class, not this payload.
        if not type(serializer).__dict__.get("__doc__"):
            schema.pop("description", None)
        for name, field in serializer.fields.items():
            prop = schema["properties"].get(name)
            if prop is None:
                continue
            if isinstance(field, serializers.ListSerializer):
                _constrain_list(field, prop)
            elif isinstance(field, serializers.IntegerField):
                _constrain_integer(prop)
            elif isinstance(field, serializers.CharField) and not isinstance(
                field, serializers.RegexField
            ):
                schema["properties"][name] = _constrain_string(field, prop)
        return schema


def _constrain_list(field: serializers.ListSerializer[Any], prop: dict[str, Any]) -> None:
    # drf-spectacular reads neither allow_empty nor the length bounds of a
    # nested list (which DRF's stubs do not declare either).
    min_length: int | None = getattr(field, "min_length", None)
    max_length: int | None = getattr(field, "max_length", None)
    min_items = min_length or (0 if field.allow_empty else 1)
    if min_items:
        prop["minItems"] = min_items
    if max_length is not None:
        prop["maxItems"] = max_length


def _constrain_integer(prop: dict[str, Any]) -> None:
    prop["maximum"] = min(prop.get("maximum", MAX_SAFE_INTEGER), MAX_SAFE_INTEGER)
    prop["minimum"] = max(prop.get("minimum", -MAX_SAFE_INTEGER), -MAX_SAFE_INTEGER)


# DRF's CharField refuses NUL characters, and trims white space (what
# str.strip() removes) before it checks that a required string is not blank:
# the patterns say the same. The white space is spelled out because \s of a
# JSON Schema (ECMA 262) pattern is not Python's: it lacks U+001C-U+001F and
# U+0085, which generated clients and fuzzers would then send as text.
PYTHON_WHITESPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_NO_NUL = r"^[^\x00]*$"
_NOT_BLANK = rf"^[^\x00]*[^\x00{PYTHON_WHITESPACE}][^\x00]*$"


def _constrain_string(field: serializers.CharField, prop: dict[str, Any]) -> dict[str, Any]:
    if not field.allow_blank:
        return {**prop, "pattern": _NOT_BLANK}
    # drf-spectacular writes an optional blank as oneOf(string, empty string);
    # "" matches both branches once the string has a pattern, which oneOf
    # forbids, so the pattern (which admits "") replaces the pair.
    branches = prop.pop("oneOf", None)
    return {**(branches[0] if branches else {}), **prop, "pattern": _NO_NUL}
