"""The feed's pagination: oldest first, by the transactions that wrote the events."""

from typing import Any

from rest_framework.request import Request
from rest_framework.utils.urls import remove_query_param

from api.pagination import NewestFirstCursorPagination


class OldestFirstCursorPagination(NewestFirstCursorPagination):
    """The lists' cursors and envelope, in the feed's order (events.selectors.feed_of).

    The cursor's position is the writing transaction's id, and a page's
    events of one transaction are told apart by their offset: a transaction
    writes one or two events.
    """

    ordering = ("txid", "seq")

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        page = super().paginate_queryset(queryset, request, view)
        # `after` says where a read starts; from its second page on, the
        # cursor says where it is. Left in the links, it would tie every
        # later page to that first event: once the purge took it (events
        # are kept EVENT_RETENTION), a long read following `next` would be
        # refused, though its cursor still held.
        self.base_url = str(remove_query_param(self.base_url or "", "after"))
        return page
