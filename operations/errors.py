"""What the operations layer raises, and what its handlers may raise to be retried."""

from api.errors import NotFound


class TransientFailure(Exception):
    """The work failed in a way that may pass: retry it later, unchanged."""


class NoSuchOperation(NotFound):
    """An operation id in the path names no operation of the caller's tenant."""
