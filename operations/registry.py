"""Which function performs which kind of operation.

Apps register their handlers (``@performs("payment.charge")``) when they
load, so the operations app runs any kind without importing the apps that
define them.
"""

from collections.abc import Callable

from operations.models import Operation

Handler = Callable[[Operation], None]
_handlers: dict[str, Handler] = {}


def performs(kind: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        _handlers[kind] = handler
        return handler

    return register


def handler_for(kind: str) -> Handler:
    return _handlers[kind]
