"""The kit judges behaviour: a conforming API passes every check, and each broken one fails
exactly the checks of what it broke.

The API is tests/conformance/reference_server.py, in a thread of this
process: a small implementation of the contract written apart from the
service, with one :class:`Break` at a time.
"""

import dataclasses
import json
from typing import Any

import pytest
import rfc8785
from idempotency_conformance import (
    CHECKS,
    ConfigError,
    Options,
    Report,
    Status,
    render_text,
    run_checks,
)
from idempotency_conformance.body import respelled

from tests.conformance.reference_server import Break, reference_server

# What each broken behaviour must fail, and nothing else.
EXPECTED: dict[Break, set[str]] = {
    Break.MISSING_KEY_ACCEPTED: {"missing-key"},
    Break.INVALID_KEYS_ACCEPTED: {"invalid-key"},
    # Every check that recognises a replay by its marker.
    Break.REPLAY_UNMARKED: {
        "replay-success",
        "replay-failure",
        "respelled-request",
        "conflict-body",
        "concurrent-copies",
    },
    # Where no Location names the resource, only the bytes can.
    Break.REPLAY_OTHER_BYTES: {"replay-success", "replay-failure"},
    Break.FAILURES_NOT_STORED: {"replay-failure"},
    Break.RAW_FINGERPRINT: {"respelled-request"},
    Break.BODY_NOT_FINGERPRINTED: {"conflict-body"},
    Break.ROUTE_NOT_FINGERPRINTED: {"conflict-endpoint", "conflict-path"},
    Break.CHECK_THEN_INSERT: {"concurrent-copies"},
    Break.REFUSALS_STORED: {"refusals-not-stored"},
    Break.KEYS_NOT_SCOPED: {"other-principal"},
    Break.POLICY_MISSING_COMMAND: {"policy"},
    Break.POLICY_CACHED_TOO_LONG: {"policy"},
    Break.RETENTION_DISAGREES: {"retention"},
}


def options(base_url: str, **overrides: Any) -> Options:
    """Options for the reference API: its two principals, and what a test changes."""
    both = Options(base_url=base_url, token="alice-token", other_token="bob-token")
    return dataclasses.replace(both, **overrides)


def verdicts(report: Report) -> dict[str, Status]:
    return {result.id: result.status for result in report.results}


def test_a_conforming_api_passes_every_check() -> None:
    with reference_server() as base_url:
        report = run_checks(options(base_url))

    assert verdicts(report) == {check.id: Status.PASS for check in CHECKS}, render_text(report)
    assert report.passed


def test_every_broken_behaviour_is_expected_to_fail_a_check() -> None:
    assert EXPECTED.keys() == set(Break)
    assert all(EXPECTED.values())
    assert set().union(*EXPECTED.values()) <= {check.id for check in CHECKS}


@pytest.mark.parametrize("broken", list(Break), ids=lambda broken: broken.name.lower())
def test_a_broken_behaviour_fails_exactly_its_checks(broken: Break) -> None:
    with reference_server(broken) as base_url:
        report = run_checks(options(base_url))

    failed = {id for id, status in verdicts(report).items() if status is Status.FAIL}
    assert failed == EXPECTED[broken], render_text(report)
    assert Status.SKIP not in verdicts(report).values()
    assert not report.passed


def test_what_an_api_does_not_publish_is_skipped_not_failed() -> None:
    with reference_server(publish_policy=False) as base_url:
        report = run_checks(options(base_url, other_token=None))

    skipped = {id for id, status in verdicts(report).items() if status is Status.SKIP}
    assert skipped == {"policy", "retention", "other-principal"}, render_text(report)
    assert report.passed


def test_a_failure_shows_the_request_and_the_answer_that_failed_it() -> None:
    with reference_server(Break.REPLAY_UNMARKED) as base_url:
        report = run_checks(options(base_url), only=["replay-success"])

    (result,) = report.results
    first, again = result.exchanges
    assert result.status is Status.FAIL
    assert result.reason == "the repeat is not marked replayed"
    assert again.key == first.key
    assert again.key is not None
    assert again.key.startswith('"replay-success-')
    assert (again.method, again.path, again.status) == ("POST", "/v1/orders", 201)
    assert again.body == first.body
    text = render_text(report)
    assert "> POST /v1/orders  token --token  key" in text
    assert '"replay-success-' in text
    assert "< 201  Location: /v1/orders/ord_" in text


def test_options_that_cannot_be_used_stop_the_run_before_any_request() -> None:
    with pytest.raises(ConfigError, match="/nope names nothing"):
        run_checks(options("http://127.0.0.1:9", vary="/nope"))
    with pytest.raises(ConfigError, match="--body is not JSON"):
        run_checks(options("http://127.0.0.1:9", body="{"))


def test_the_respelled_body_is_the_same_json_to_rfc_8785_in_other_bytes() -> None:
    body: dict[str, Any] = {
        "customerId": "c-1",
        "items": [{"sku": "ABC", "qty": 2}],
        "currency": "RUB",
    }

    spelled = respelled(body)

    assert spelled != json.dumps(body).encode()
    assert b"2.0" in spelled
    assert rfc8785.dumps(json.loads(spelled)) == rfc8785.dumps(body)
