"""What the idempotency layer did with each command, for ``/metrics``."""

from prometheus_client import Counter, Histogram

from observability.metrics import DURATION_BUCKETS

IDEMPOTENCY_OUTCOMES = Counter(
    "idempotency_outcomes_total",
    "Commands by what the idempotency layer did with them.",
    ["command", "outcome"],
)
COMMAND_DURATION = Histogram(
    "command_duration_seconds",
    "Time to answer a command, replays and refusals included.",
    ["command"],
    buckets=DURATION_BUCKETS,
)
