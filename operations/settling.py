"""An operator ending an operation whose attempts have run out (``manage.py operations settle``).

Its kind's give-up needs an answer nobody gives (the provider's look-up):
the workers ask again every ``retry.max_delay``, without end, until the
answer comes or an operator settles it (docs/SPECIFICATION.md §4 rule 10).
"""

import structlog

from operations import registry
from operations.attempts import Retry, claim_operation, give_back, last_failure, lease_kept
from operations.errors import NoSuchOperation, NotSettled, StillUnanswered
from operations.models import Operation
from operations.registry import OperationKind
from operations.services import fail_operation

logger = structlog.get_logger(__name__)


def settle_operation(operation_id: str, *, verdict: registry.Verdict | None = None) -> Operation:
    """End by hand an operation whose attempts have run out; the operation as it ended.

    Without a verdict its kind's give-up runs once more: the provider is
    asked what it holds, and the operation ends as it answers. With one
    (the operator learned the outcome elsewhere), it ends as the verdict
    says. The operation is claimed first, as by a worker, so that no
    worker's attempt runs at the same time; if it is not ended, the claim
    is given back and the workers go on asking. An operation that ended
    already is returned as it is, unless the verdict contradicts it.

    Only an operation out of attempts is settled: before that, its own
    attempts may still end it, and an operator's verdict would race them.

    :raises NoSuchOperation: no operation has that id.
    :raises NotSettled: it cannot be settled (the message says why).
    :raises StillUnanswered: the provider still cannot say; nothing changed.
    """
    operation = Operation.objects.filter(pk=operation_id).first()
    if operation is None:
        raise NoSuchOperation(f"No operation {operation_id}.")
    kind = registry.kind_of(operation)
    if operation.status != Operation.Status.PROCESSING:
        if verdict is not None and verdict.succeeded != (
            operation.status == Operation.Status.SUCCEEDED
        ):
            raise NotSettled(
                f"It ended {operation.status} already, on the provider's word; nothing changed."
            )
        return operation
    end = _ending(kind, verdict)
    budget = kind.retry.budget()
    if operation.attempts < budget:
        raise NotSettled(
            f"It has made {operation.attempts} of its {budget} attempts, and the workers"
            " are still making them: settle an operation once it has used all of them."
        )
    claimed = claim_operation(operation_id)
    if claimed is None:
        return _settled_meanwhile(operation_id, verdict)
    failure = last_failure(claimed)
    try:
        with lease_kept(claimed):
            end(claimed, failure)
    except Exception as exc:
        # Given back as after any attempt that could not end it: the
        # workers ask again after the longest backoff.
        give_back(claimed, Retry(failure, kind.retry.max_delay))
        if isinstance(exc, kind.retry.on):
            raise StillUnanswered(f"The provider still cannot say: {exc}") from exc
        raise
    settled = Operation.objects.get(pk=operation_id)
    logger.warning(
        "operation settled by an operator",
        operation_id=operation_id,
        kind=settled.kind,
        status=settled.status,
        verdict="asked the provider"
        if verdict is None
        else ("succeeded" if verdict.succeeded else "failed"),
        reference=verdict.reference if verdict is not None else "",
    )
    return settled


def _ending(kind: OperationKind, verdict: registry.Verdict | None) -> registry.GiveUp:
    """What ends an operation of ``kind``: its give-up, or its settle with ``verdict``."""
    if verdict is None:
        return kind.give_up or fail_operation
    settle = kind.settle
    if settle is None:
        raise NotSettled(f"Operations of kind {kind.name} end by themselves: no verdict is taken.")
    return lambda operation, failure: settle(operation, failure, verdict)


def _settled_meanwhile(operation_id: str, verdict: registry.Verdict | None) -> Operation:
    """The operation a worker held when the operator came: ended meanwhile, or still held."""
    operation = Operation.objects.get(pk=operation_id)
    if operation.status == Operation.Status.PROCESSING:
        raise NotSettled(
            "A worker is asking the provider about it right now; run the command again"
            f" after {operation.claimed_until:%H:%M:%S} UTC."
        )
    return settle_operation(operation_id, verdict=verdict)
