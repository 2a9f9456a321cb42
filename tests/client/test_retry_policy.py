"""The retry policy, as a pure function: what is retried, how long it waits, when it stops.

No client, no network, no clock: each test asks ``RetryPolicy`` about one
outcome. Jitter comes from a seeded ``random.Random`` or from one that
always draws the upper bound, so every bound is checked exactly.
"""

import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from order_service_client import FAILOVER_GOAL_S, RetryPolicy
from order_service_client.retry import parse_retry_after, transient


class Highest(random.Random):
    """Draws the upper bound of every range: the longest backoff the policy allows."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Lowest(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return a


POLICY = RetryPolicy()

# Answers that may change if the same request is sent again.
RETRYABLE = [
    (500, "InternalError"),
    (502, None),
    (503, "ServiceUnavailable"),
    (504, None),
    (409, "IdempotencyKeyInProgress"),
    (429, "Throttled"),
]

# Every 4xx of docs/SPECIFICATION.md §2 but 409 IdempotencyKeyInProgress and 429:
# the request is at fault, and the same request gets the same answer.
FINAL_4XX = [
    (400, "ValidationError"),
    (400, "MalformedJson"),
    (400, "IdempotencyKeyRequired"),
    (400, "IdempotencyKeyInvalid"),
    (401, "NotAuthenticated"),
    (401, "AuthenticationFailed"),
    (404, "NotFound"),
    (405, "MethodNotAllowed"),
    (406, "NotAcceptable"),
    (409, "IdempotencyKeyConflict"),
    (409, "OrderStateConflict"),
    (409, "OrderAlreadyPaid"),
    (409, "PaymentInProgress"),
    # The id is taken by another order; a stale If-Match. Both stored under the key.
    (409, "OrderAlreadyExists"),
    (412, "PreconditionFailed"),
    (413, "PayloadTooLarge"),
    (415, "UnsupportedMediaType"),
    (422, "UnknownSku"),
    (422, "CurrencyMismatch"),
    (422, "AmountMismatch"),
    (422, "OrderNotFound"),
    # Not the contract's, and as final: a 409 without a code, and a 408.
    (409, None),
    (408, None),
]


def delay(
    policy: RetryPolicy = POLICY,
    attempt: int = 1,
    *,
    status: int | None = 503,
    error_code: str | None = None,
    retry_after: float | None = None,
    elapsed: float = 0.0,
    replayed: bool = False,
    rng: random.Random | None = None,
) -> float | None:
    return policy.next_delay(
        attempt,
        status=status,
        error_code=error_code,
        retry_after=retry_after,
        elapsed=elapsed,
        replayed=replayed,
        rng=rng or random.Random(7),
    )


# What is retried.


def test_no_answer_at_all_is_retried() -> None:
    assert POLICY.retryable(status=None, error_code=None)
    assert delay(status=None) is not None


@pytest.mark.parametrize(("status", "code"), RETRYABLE)
def test_transient_answers_are_retried(status: int, code: str | None) -> None:
    assert POLICY.retryable(status=status, error_code=code)
    assert delay(status=status, error_code=code) is not None


@pytest.mark.parametrize(("status", "code"), FINAL_4XX)
def test_every_other_4xx_is_final(status: int, code: str | None) -> None:
    assert not POLICY.retryable(status=status, error_code=code)
    assert delay(status=status, error_code=code) is None


@pytest.mark.parametrize("status", [200, 201, 202, 204, 304])
def test_successes_are_final(status: int) -> None:
    assert delay(status=status) is None


def test_a_replayed_server_error_is_final() -> None:
    # The service stored it as the command's outcome; a retry replays the same bytes.
    assert not POLICY.retryable(status=500, error_code="InternalError", replayed=True)
    assert delay(status=500, error_code="InternalError", replayed=True) is None


@pytest.mark.parametrize("status", [501, 505])
def test_server_errors_that_describe_the_server_for_good_are_final(status: int) -> None:
    assert delay(status=status) is None


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow connect"),
        httpx.ReadTimeout("slow answer"),
        httpx.WriteTimeout("slow send"),
        httpx.PoolTimeout("no connection free"),
        httpx.ReadError("reset"),
        httpx.WriteError("broken pipe"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.ProxyError("proxy down"),
    ],
)
def test_transport_failures_are_transient(error: httpx.TransportError) -> None:
    assert transient(error)


@pytest.mark.parametrize(
    "error", [httpx.LocalProtocolError("bad header"), httpx.UnsupportedProtocol("ftp://")]
)
def test_the_clients_own_mistakes_are_not_transient(error: httpx.TransportError) -> None:
    assert not transient(error)


# How long it waits.


@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_is_full_jitter_between_zero_and_the_cap(attempt: int) -> None:
    policy = RetryPolicy(max_attempts=100)
    cap = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
    rng = random.Random(attempt)

    draws = [delay(policy, attempt, rng=rng) for _ in range(2000)]

    assert policy.backoff_cap(attempt) == pytest.approx(cap)
    assert all(d is not None and 0 <= d <= cap for d in draws)
    # Full jitter: the draws cover the whole range, not just its top.
    assert min(d for d in draws if d is not None) < cap * 0.05
    assert max(d for d in draws if d is not None) > cap * 0.95


def test_backoff_doubles_from_base_delay_up_to_max_delay() -> None:
    policy = RetryPolicy(max_attempts=100, base_delay=0.1, max_delay=5.0)

    longest = [delay(policy, attempt, rng=Highest()) for attempt in range(1, 10)]

    assert longest == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])


def test_the_cap_holds_for_any_number_of_attempts() -> None:
    policy = RetryPolicy(max_attempts=10**6, deadline=10**9)

    assert policy.backoff_cap(10**5) == policy.max_delay
    assert delay(policy, 10**5, rng=Highest()) == policy.max_delay


@pytest.mark.parametrize("retry_after", [0.0, 0.5, 2.0, 7.0, 30.0])
def test_retry_after_is_waited_at_least(retry_after: float) -> None:
    # 7 and 30 exceed max_delay: the server's word is not capped by our guesses.
    policy = RetryPolicy(deadline=600.0)
    shortest = delay(policy, 3, retry_after=retry_after, rng=Lowest())
    longest = delay(policy, 3, retry_after=retry_after, rng=Highest())

    assert shortest == pytest.approx(retry_after)
    # On top of it, a jitter no longer than the backoff's, to spread clients out.
    assert longest == pytest.approx(retry_after + policy.backoff_cap(3))


def test_retry_after_is_honoured_for_every_retryable_answer() -> None:
    for status, code in RETRYABLE:
        waited = delay(status=status, error_code=code, retry_after=3.0)

        assert waited is not None
        assert waited >= 3.0


def test_a_retry_after_reaching_past_the_deadline_ends_the_retries() -> None:
    policy = RetryPolicy(deadline=60.0)

    assert delay(policy, retry_after=3600.0) is None
    assert delay(policy, retry_after=30.0, elapsed=31.0, rng=Lowest()) is None
    assert delay(policy, retry_after=30.0, elapsed=29.0, rng=Lowest()) == 30.0


# When it stops.


def test_no_attempt_starts_at_or_after_the_deadline() -> None:
    policy = RetryPolicy(deadline=10.0, max_attempts=100)

    assert delay(policy, 1, elapsed=9.89, rng=Highest()) == pytest.approx(0.1)
    assert delay(policy, 1, elapsed=9.9, rng=Highest()) is None
    assert delay(policy, 1, elapsed=10.0, rng=Lowest()) is None
    assert delay(policy, 1, elapsed=12.0, rng=Lowest()) is None


def test_max_attempts_counts_the_first_attempt() -> None:
    policy = RetryPolicy(max_attempts=3)

    assert delay(policy, 1) is not None
    assert delay(policy, 2) is not None
    assert delay(policy, 3) is None


def test_one_attempt_means_no_retry() -> None:
    assert delay(RetryPolicy(max_attempts=1), 1, status=None) is None


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"deadline": 0.0},
        {"base_delay": -1.0},
        {"base_delay": 6.0, "max_delay": 5.0},
    ],
)
def test_a_policy_that_cannot_work_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must"):
        RetryPolicy(**options)


def test_the_policy_is_immutable() -> None:
    with pytest.raises(AttributeError):
        POLICY.max_attempts = 1  # type: ignore[misc]


# Retry-After as the header spells it.


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), (" 10 ", 10.0), ("0", 0.0), (None, None), ("", None), ("soon", None)],
)
def test_retry_after_in_seconds(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value) == seconds


@pytest.mark.parametrize("value", ["-1", "1.5", "²"])
def test_retry_after_that_is_not_delay_seconds_is_ignored(value: str) -> None:
    assert parse_retry_after(value) is None


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    later = (now + timedelta(seconds=90)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    earlier = (now - timedelta(seconds=90)).strftime("%a, %d %b %Y %H:%M:%S GMT")

    assert parse_retry_after(later, now=now) == 90.0
    assert parse_retry_after(earlier, now=now) == 0.0


def test_the_default_deadline_is_twice_the_documented_failover_goal() -> None:
    # docs/RELIABILITY.md's row of a primary's machine killed states the
    # goal its recovery is held to; the client must outlast it.
    reliability = (Path(__file__).resolve().parents[2] / "docs" / "RELIABILITY.md").read_text()
    (machine_killed,) = re.findall(
        r"^PostgreSQL primary's machine killed .*\(goal (\d+) s\)$", reliability, re.MULTILINE
    )

    assert float(machine_killed) == FAILOVER_GOAL_S
    assert RetryPolicy().deadline == 2 * FAILOVER_GOAL_S
    assert RetryPolicy().max_attempts is None


def test_with_no_count_only_the_deadline_ends_the_retries() -> None:
    policy = RetryPolicy(deadline=60.0)

    assert delay(policy, 10**6, status=None) is not None
    assert delay(policy, 1, status=None, elapsed=60.0) is None
