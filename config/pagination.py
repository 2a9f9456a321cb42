from typing import Any

from rest_framework.pagination import CursorPagination
from rest_framework.request import Request


class NewestFirstCursorPagination(CursorPagination):
    """``{"results", "next", "previous"}``, newest first, with path-absolute links.

    A cursor stays correct while rows are inserted, unlike page numbers, and
    costs one indexed range scan however deep the client pages.
    """

    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "pageSize"
    max_page_size = 200

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        page = super().paginate_queryset(queryset, request, view)
        # Links are path-absolute (/v1/…), like every link we answer.
        self.base_url = request.get_full_path()
        return page
