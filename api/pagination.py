import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.core import signing
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from api.errors import ApplicationError

MIN_PAGE_SIZE, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 1, 50, 200


class InvalidListQuery(ApplicationError):
    status_code = 400
    code = "ValidationError"
    title = "Validation failed"
    default_message = "The query parameters are not valid; see details."


class NewestFirstCursorPagination(CursorPagination):
    """``{"results", "next", "previous", "nextCursor", "previousCursor"}``, newest first.

    Links are path-absolute; the cursors are the links' ``cursor`` parameter on
    their own, for clients that build their requests from parameters (a
    generated client) rather than follow URLs.

    A cursor stays correct while rows are inserted, unlike page numbers, and
    costs one indexed range scan however deep the client pages.

    Cursors are signed (``django.core.signing``, keyed by ``SECRET_KEY``):
    DRF's are plain base64 of a position that goes straight into a query, so
    a client could write its own, and a position the database cannot read
    (an impossible time-zone offset) was a 500. A cursor this service did
    not issue, or issued under another ``SECRET_KEY``, is a 400 that says to
    start again from the first page.

    A cursor is good only on the list that issued it: the same path (so the
    same route, and for a webhook endpoint's deliveries the same endpoint),
    the same tenant and the same ``scope`` filters. A position means nothing
    elsewhere: an orders cursor's creation time read as the feed's
    transaction id was a 500, and on another endpoint's deliveries it would
    quietly skip rows. The signature covers the list's identity, which is
    not written into the cursor: it costs no length, and shows no tenant's
    id. A cursor of another list fails its signature like a forged one, and
    is the same 400.
    """

    ordering = ("-created_at", "-id")
    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "pageSize"
    max_page_size = MAX_PAGE_SIZE
    # Set by paginate_queryset, like DRF's own state of a page.
    _signer: signing.Signer

    def __init__(self, *, tenant: int, scope: Mapping[str, str | None] | None = None) -> None:
        """A page of the list at the request's path, for ``tenant`` (its id), filtered by ``scope``.

        ``scope``: the query parameters that choose which rows the list
        holds (the feed's ``type``), by name. Not ``pageSize``: a client may
        change it from one page to the next.
        """
        self._tenant = tenant
        self._scope = dict(scope or {})

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        # Before the cursor is read: its signature is the list's.
        self._signer = _signer([request.path_info, self._tenant, sorted(self._scope.items())])
        page = super().paginate_queryset(queryset, request, view)
        # Links are path-absolute (/v1/…), like every link we answer.
        self.base_url = request.get_full_path()
        return page

    def get_paginated_response(self, data: Any) -> Response:
        next_link, previous_link = self.get_next_link(), self.get_previous_link()
        return Response(
            {
                "results": data,
                "next": next_link,
                "previous": previous_link,
                "nextCursor": self._cursor_of(next_link),
                "previousCursor": self._cursor_of(previous_link),
            }
        )

    def _cursor_of(self, link: str | None) -> str | None:
        if link is None:
            return None
        return parse_qs(urlsplit(link).query)[self.cursor_query_param][0]

    def get_page_size(self, request: Request) -> int:
        """``pageSize`` as the client sent it, or the default; anything else is refused.

        DRF would quietly use the default for ``0``, ``-1`` or ``abc`` and
        the maximum for ``500``: a client would page through other pages
        than it asked for, without knowing.

        :raises InvalidListQuery: not an integer from 1 to 200.
        """
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 3):
            raise _invalid_page_size()
        size = int(raw)
        if not MIN_PAGE_SIZE <= size <= MAX_PAGE_SIZE:
            raise _invalid_page_size()
        return size

    def encode_cursor(self, cursor: Cursor) -> str:
        token = self._signer.sign_object([cursor.offset, cursor.reverse, cursor.position])
        return str(replace_query_param(self.base_url or "", self.cursor_query_param, token))

    def decode_cursor(self, request: Request) -> Cursor | None:
        """The cursor of the request, if it sent one.

        :raises InvalidListQuery: a cursor this list did not issue.
        """
        token = request.query_params.get(self.cursor_query_param)
        if token is None:
            return None
        try:
            offset, reverse, position = self._signer.unsign_object(token)
        except (signing.BadSignature, ValueError, TypeError):
            raise InvalidListQuery(
                details={
                    "cursor": [
                        "Not a cursor of this list (its path, its filters, your tenant), "
                        "or no longer readable: take `next` or `previous` from a page of "
                        "it, or start again without one."
                    ]
                }
            ) from None
        return Cursor(offset=offset, reverse=reverse, position=position)


def _signer(identity: list[Any]) -> signing.Signer:
    """Signs and checks the cursors of one list, named by ``identity``.

    The identity is the salt: Django's signer derives its key from the salt
    and ``SECRET_KEY``, so a cursor verifies only under the list it was made
    for. JSON makes the identity one unambiguous string.
    """
    return signing.Signer(salt="api.pagination.cursor:" + json.dumps(identity))


def _invalid_page_size() -> InvalidListQuery:
    return InvalidListQuery(
        details={"pageSize": [f"Must be an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}."]}
    )
