"""What the operations layer raises, and what its handlers may raise to be retried."""

from typing import Protocol

from api.errors import NotFound


class TransientFailure(Exception):
    """The work failed in a way that may pass: retry it later, unchanged."""


class Awaited(Protocol):
    """What a postponed attempt waits for (an endpoint, a tenant's slot), by name.

    Whoever frees it publishes the operations that wait for it
    (operations.services.publish_waiting), but could not yet see one that
    was postponing itself at that moment. So once a postponement is
    recorded, :meth:`came_free` is asked once: True, and the operation is
    published at once rather than after its delay.
    """

    def came_free(self) -> bool:
        """Whether what the attempt waited for is free now."""
        ...


class Postponed(Exception):
    """The attempt could not start yet (what it needs is busy): try again in ``delay`` seconds.

    Unlike a failure, a postponed attempt does not count against the kind's
    attempt budget: nothing was tried. A webhook delivery postpones itself
    while another delivery to the same endpoint is under way, so that a slow
    endpoint holds one worker at most.
    """

    def __init__(self, delay: float, *, awaiting: Awaited | None = None) -> None:
        super().__init__(f"postponed for {delay:.1f} s")
        self.delay = delay
        self.awaiting = awaiting


class NoSuchOperation(NotFound):
    """An operation id in the path names no operation of the caller's tenant."""


class NotSettled(Exception):
    """``operations settle`` could not end the operation; the message says why, for the operator."""


class StillUnanswered(NotSettled):
    """The one who can tell how the operation ended (the provider) still cannot say."""
