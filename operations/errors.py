"""What the operations layer raises, and what its handlers may raise to be retried."""

from collections.abc import Callable

from api.errors import NotFound


class TransientFailure(Exception):
    """The work failed in a way that may pass: retry it later, unchanged."""


class Postponed(Exception):
    """The attempt could not start yet (what it needs is busy): try again in ``delay`` seconds.

    Unlike a failure, a postponed attempt does not count against the kind's
    attempt budget: nothing was tried. A webhook delivery postpones itself
    while another delivery to the same endpoint is under way, so that a slow
    endpoint holds one worker at most.
    """

    def __init__(self, delay: float, *, unless: Callable[[], bool] | None = None) -> None:
        super().__init__(f"postponed for {delay:.1f} s")
        self.delay = delay
        # Asked once the postponement is recorded: True if what the attempt
        # waited for came free meanwhile (whoever freed it could not yet see
        # this attempt waiting), and the operation is published at once.
        self.unless = unless


class NoSuchOperation(NotFound):
    """An operation id in the path names no operation of the caller's tenant."""


class NotSettled(Exception):
    """``operations settle`` could not end the operation; the message says why, for the operator."""


class StillUnanswered(NotSettled):
    """The one who can tell how the operation ended (the provider) still cannot say."""
