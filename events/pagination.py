"""The feed's pagination: oldest first, by the transactions that wrote the events."""

from api.pagination import NewestFirstCursorPagination


class OldestFirstCursorPagination(NewestFirstCursorPagination):
    """The lists' cursors and envelope, in the feed's order (events.selectors.feed_of).

    The cursor's position is the writing transaction's id, and a page's
    events of one transaction are told apart by their offset: a transaction
    writes one or two events.
    """

    ordering = ("txid", "seq")
