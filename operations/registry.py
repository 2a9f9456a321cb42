"""The kinds of operation, as the apps that define them register them.

The operations app runs, links and retries work it knows nothing about:
each kind is registered, when its app loads, with the function that
performs it, where its result lives, and how its failures are retried::

    @operations.registry.register(
        "payment.charge",
        result_path=lambda payment_id: f"/v1/payments/{payment_id}",
        retry=RetryPolicy(on=(ProviderUnavailable,), first_delay=lambda: 1.0),
    )
    def charge_payment(operation: Operation) -> None: ...

So the dependency points one way: the domain imports operations, never the
reverse.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from operations.errors import TransientFailure
from operations.models import Operation

Handler = Callable[[Operation], None]


def _one_second() -> float:
    return 1.0


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed attempt is retried, and after how long.

    An attempt that raises one of ``on`` is retried after ``first_delay()``
    seconds, doubling with each retry up to ``max_delay``; any other
    exception is a bug, left to the worker's log and the sweep. The first
    delay is read at each retry (a callable), so it can come from settings.
    """

    on: tuple[type[BaseException], ...] = (TransientFailure,)
    first_delay: Callable[[], float] = _one_second
    # A minute: long enough to ride out a provider's brief outage, short
    # enough that a customer is not kept waiting long after it ends.
    max_delay: float = 60.0

    def delay(self, retries: int) -> float:
        """Seconds before the retry that follows ``retries`` earlier ones."""
        return min(self.first_delay() * 2**retries, self.max_delay)


@dataclass(frozen=True)
class OperationKind:
    """A registered kind: what performs it, where its result is, how it is retried."""

    name: str
    handler: Handler
    # The path of the resource an operation of this kind works on
    # (``links.result``), from its ``result_id``.
    result_path: Callable[[str], str]
    retry: RetryPolicy = field(default_factory=RetryPolicy)


_kinds: dict[str, OperationKind] = {}


def register(
    name: str, *, result_path: Callable[[str], str], retry: RetryPolicy | None = None
) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of operations of kind ``name``."""

    def decorate(handler: Handler) -> Handler:
        if name in _kinds and _kinds[name].handler is not handler:
            raise ValueError(f"Operation kind {name!r} is registered twice.")
        _kinds[name] = OperationKind(
            name=name, handler=handler, result_path=result_path, retry=retry or RetryPolicy()
        )
        return handler

    return decorate


def kind_of(operation: Operation) -> OperationKind:
    """The registration of ``operation``'s kind.

    :raises LookupError: no app registered that kind.
    """
    try:
        return _kinds[operation.kind]
    except KeyError:
        raise LookupError(f"No handler for operation kind {operation.kind!r}.") from None


def kinds() -> list[str]:
    """Every registered kind, in registration order (the schema's enum, the metric's labels)."""
    return list(_kinds)
