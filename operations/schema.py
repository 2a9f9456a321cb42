"""How the operations endpoint is described in the OpenAPI schema."""

from drf_spectacular.utils import OpenApiResponse

from api.openapi.parameters import path_id
from api.openapi.problems import not_found
from api.openapi.reads import read_schema
from operations.polling import RULE
from operations.serializers import OperationOutput

get_operation = read_schema(
    operation_id="getOperation",
    summary="Poll an operation",
    description=(
        "The state of asynchronous work, read from the database. `status` only moves "
        "forward: `processing` → `succeeded` | `failed`; `Retry-After` comes with "
        f"`processing`, and grows with the operation's age: {RULE}. The `202` of a command "
        "that started the operation, and its replays, carry the same. `resultId` names "
        "what the operation works on, and `links.result` "
        "where to read it: the payment of a `payment.charge`, the order of an "
        "`order.refund`. Every operation ends: a failed attempt is retried with backoff, "
        "and after the deployment's `OPERATION_MAX_ATTEMPTS` attempts "
        "the operation ends `failed`, unless the provider holds what it asked for, which "
        "is then its outcome. An ended operation is kept for the deployment's "
        "`OPERATION_RETENTION` (never less than its `IDEMPOTENCY_KEY_TTL`, so a replay of "
        "the `202` always finds it) and then purged: its id is then `404 NotFound`, as an "
        "unknown id is. A `processing` operation is never purged. A webhook delivery is the "
        "service's own work, not an operation of yours: its endpoint's deliveries tell how "
        "it went."
    ),
    tag="operations",
    response=OpenApiResponse(OperationOutput, "The operation."),
    refusals=[not_found("operation", "op_5h7j9l1n3p5r7t9v1x3z5b7d9")],
    parameters=[path_id("operation_id", "op")],
    retry_after=True,
    conditional=True,
)
