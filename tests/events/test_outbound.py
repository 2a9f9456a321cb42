"""An outbound request ends within its timeout in all, however the receiver paces its answer."""

import time

import pytest

from events import outbound
from tests.support.receiver import Hostile, hostile

TIMEOUT = 1.0
# Far above what the bound allows, far below what the receivers would take:
# the trickle and the silence last as long as the client stays.
ENDED_WITHIN = TIMEOUT + 2.0


@pytest.mark.parametrize("pace", ["trickle", "silent"])
def test_a_receiver_that_never_finishes_its_answer_is_left_at_the_timeout(pace: str) -> None:
    with hostile(pace) as receiver:
        started = time.monotonic()
        with pytest.raises(outbound.Unanswered) as unanswered:
            outbound.post(receiver.url, content=b"{}", headers={}, timeout=TIMEOUT)
        took = time.monotonic() - started

        assert receiver.closed.wait(5), "the connection was left open"
    assert took < ENDED_WITHIN
    assert str(unanswered.value) == f"No answer within {TIMEOUT:g} s."
    assert receiver.connections == 1  # not tried again within the attempt


def test_a_trickle_outlasts_every_read_timeout_but_not_the_bound() -> None:
    # Each byte comes well within the read timeout: only a bound on the
    # whole request ends it.
    with hostile("trickle", every=TIMEOUT / 4) as receiver:
        with pytest.raises(outbound.Unanswered):
            outbound.post(receiver.url, content=b"{}", headers={}, timeout=TIMEOUT)
        assert receiver.closed.wait(5)


def test_an_endless_body_is_never_read() -> None:
    with hostile("endless") as receiver:
        status = outbound.post(receiver.url, content=b"{}", headers={}, timeout=TIMEOUT)

        assert receiver.closed.wait(5), "the body was being read"
    assert status == 200


def test_a_refused_connection_is_said_without_the_network_s_internals() -> None:
    with hostile("silent") as receiver:
        url = receiver.url
    with pytest.raises(outbound.Unanswered) as unanswered:
        outbound.post(url, content=b"{}", headers={}, timeout=TIMEOUT)

    assert str(unanswered.value) == "The endpoint refused the connection."
    assert "ConnectionRefusedError" in unanswered.value.detail  # for the log only


def test_every_pace_is_held() -> None:
    assert set(Hostile.PACES) == {"trickle", "silent", "endless"}
