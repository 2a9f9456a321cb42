"""The kinds of operation, as the apps that define them register them.

The operations app runs, links, retries and ends work it knows nothing
about: each kind is registered, when its app loads, with the function that
performs it, where its result lives, how its failures are retried, and how
it ends once its attempts have run out::

    @operations.registry.register(
        "payment.charge",
        result_path=lambda payment_id: f"/v1/payments/{payment_id}",
        retry=RetryPolicy(on=(ProviderUnavailable,), error="ProviderUnavailable"),
        give_up=settle_charge,
    )
    def charge_payment(operation: Operation) -> None: ...

So the dependency points one way: the domain imports operations, never the
reverse.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from operations.errors import TransientFailure
from operations.models import Operation

# The error an operation ends with when an exception that its kind's retry
# policy does not name (a bug) failed its last attempt, or a worker was lost
# during it (docs/SPECIFICATION.md §4 rule 10).
INTERNAL_ERROR = "InternalError"


@dataclass(frozen=True)
class Failure:
    """Why an attempt failed: the error the operation ends with if it is the last."""

    # A stable PascalCase code, such as "ProviderUnavailable".
    code: str
    # For people, the client among them: it says what happened to the
    # request, never what happened inside the server.
    message: str


Handler = Callable[[Operation], None]
# Ends an operation whose attempts have run out (``failure`` is why the last
# one failed); raises if it cannot tell yet how it ended (the provider does
# not answer), and is then asked again later.
GiveUp = Callable[[Operation, Failure], None]


@dataclass(frozen=True)
class Verdict:
    """How an operation ended, as an operator learned it elsewhere (``operations settle``).

    For when the only one who can tell, the provider, cannot answer: the
    operator asked its support, or read its dashboard.
    """

    # The work was done (charged, refunded), or it was not.
    succeeded: bool
    # The provider's id for the work done (a charge's), if the operator has it.
    reference: str = ""


# Ends an operation as a Verdict says (``failure`` is why its last attempt
# failed), for a kind whose give_up asks someone who may stay silent.
Settle = Callable[[Operation, Failure, Verdict], None]


def default_queue() -> str:
    """The broker queue of every kind that names none: Celery's default queue."""
    return str(settings.CELERY_TASK_DEFAULT_QUEUE)


def _one_second() -> float:
    return 1.0


def _operation_max_attempts() -> int:
    return int(settings.OPERATION_MAX_ATTEMPTS)


@dataclass(frozen=True)
class RetryPolicy:
    """How long a failed attempt waits for the next, and what its failure is called.

    Every failed attempt is retried, until the attempt budget (``budget()``,
    ``OPERATION_MAX_ATTEMPTS`` unless the kind says otherwise) is spent,
    after ``first_delay()`` seconds, doubling with each attempt up to
    ``max_delay``. An exception of ``on`` is a failure that may pass (a
    provider's timeout), recorded as ``error``; any other is a bug, logged
    with its traceback and recorded as ``InternalError``. The first delay
    and the budget are read at each retry (callables), so they can come
    from settings.
    """

    on: tuple[type[BaseException], ...] = (TransientFailure,)
    error: str = "Unavailable"
    first_delay: Callable[[], float] = _one_second
    # A minute: long enough to ride out a provider's brief outage, short
    # enough that a customer is not kept waiting long after it ends.
    max_delay: float = 60.0
    # Read at each attempt too, from settings (OPERATION_MAX_ATTEMPTS, or a
    # kind's own such as WEBHOOK_MAX_ATTEMPTS).
    budget: Callable[[], int] = _operation_max_attempts

    def delay(self, attempts: int) -> float:
        """Seconds between the end of attempt number ``attempts`` (from 1) and the next."""
        return min(self.first_delay() * 2.0 ** (attempts - 1), self.max_delay)


@dataclass(frozen=True)
class OperationKind:
    """A registered kind: what performs it, where its result is, how it is retried and ended."""

    name: str
    handler: Handler
    # The path of the resource an operation of this kind works on
    # (``links.result``), from its ``result_id``. None: the service's own
    # work, which no command of a client starts and no client is given the
    # id of (a webhook delivery, whose endpoint's deliveries tell how it
    # went): GET /v1/operations/{id} does not show it (client_kinds()).
    result_path: Callable[[str], str] | None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # None: the operation ends failed with its last attempt's failure
    # (operations.services.fail_operation). A kind whose attempts may have
    # had an effect elsewhere (a charge) asks there first.
    give_up: GiveUp | None = None
    # None: only give_up ends it, and an operator cannot tell it how it
    # ended. A kind whose give_up may stay unanswered has one.
    settle: Settle | None = None
    # The broker queue its messages go to. A kind whose attempts may be slow
    # for reasons a client controls (a webhook receiver) has a queue of its
    # own, consumed by workers of its own, so that it never takes the slots
    # the other kinds need (docs/DEPLOYING.md, "Workers"). Read when a
    # message is sent, from settings.
    queue: Callable[[], str] = default_queue


_kinds: dict[str, OperationKind] = {}


def register(
    name: str,
    *,
    result_path: Callable[[str], str] | None,
    retry: RetryPolicy | None = None,
    give_up: GiveUp | None = None,
    settle: Settle | None = None,
    queue: Callable[[], str] = default_queue,
) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of operations of kind ``name``."""

    def decorate(handler: Handler) -> Handler:
        if name in _kinds and _kinds[name].handler is not handler:
            raise ValueError(f"Operation kind {name!r} is registered twice.")
        _kinds[name] = OperationKind(
            name=name,
            handler=handler,
            result_path=result_path,
            retry=retry or RetryPolicy(),
            give_up=give_up,
            settle=settle,
            queue=queue,
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


def require(kind: str) -> None:
    """Refuse to start an operation of a kind no app registered.

    Its message would find no handler: every worker that took it would
    fail, and the operation would stay processing. Refused here, the
    omission fails the first test that runs the command, in the command's
    own transaction.

    :raises LookupError: ``kind`` is not registered.
    """
    if kind not in _kinds:
        raise LookupError(f"Operation kind {kind!r} is not registered (operations.registry).")


def kinds() -> list[str]:
    """Every registered kind, in registration order (the metric's labels)."""
    return list(_kinds)


def client_kinds() -> list[str]:
    """The kinds a client reads at GET /v1/operations/{id}, those with a result path.

    The schema's enum of an operation's ``kind``.
    """
    return [name for name, kind in _kinds.items() if kind.result_path is not None]


def result_path_of(operation: Operation) -> str | None:
    """The path of ``operation``'s result (``links.result``); None for the service's own work."""
    path = kind_of(operation).result_path
    return None if path is None else path(operation.result_id)


def queue_of(kind: str) -> str:
    """The broker queue of a kind's messages; the default queue for a kind nobody registered."""
    registered = _kinds.get(kind)
    return registered.queue() if registered is not None else default_queue()


def kinds_by_queue() -> dict[str, list[str]]:
    """Every registered kind, grouped by the queue its messages go to."""
    queues: dict[str, list[str]] = {}
    for kind in _kinds.values():
        queues.setdefault(kind.queue(), []).append(kind.name)
    return queues


def registrations() -> list[OperationKind]:
    """Every registered kind's registration, in registration order."""
    return list(_kinds.values())
