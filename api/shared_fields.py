"""Serializer fields built once per class rather than once per request: a speed trick.

DRF builds a serializer's fields on first use by each instance, deep-copying
every declared field (and a list's child serializer with its own fields):
for ``CreateOrderInput`` and ``CreatePaymentInput``, more Python in every
``POST /v1/orders`` and ``POST /v1/payments`` than validating the body
(docs/SCALING.md, "Where a create's Python went").
Validation reads its fields and writes nothing to them, so the instances
of a class may share one set, built by the first and bound to it.

Only for input serializers whose fields depend on nothing but their
declaration: no context, no ``partial``, nothing read from the settings
when a field is built (``CreatePaymentInput``'s methods follow
``PAYMENT_GATEWAY``: its field reads them when they are read).
tests/api/test_shared_fields.py fails if two instances stop sharing them.
To remove the trick, drop :class:`SharedFields` from a serializer's bases.
"""

import threading
from typing import Any

from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict

_built: dict[type, BindingDict] = {}
_building = threading.Lock()


class SharedFields(serializers.Serializer[Any]):
    """A serializer whose instances share the fields the first one built."""

    @property
    def fields(self) -> BindingDict:
        shared = _built.get(type(self))
        if shared is None:
            with _building:
                shared = _built.get(type(self))
                if shared is None:
                    shared = BindingDict(self)
                    for name, field in self.get_fields().items():
                        shared[name] = field
                    _built[type(self)] = shared
        return shared
