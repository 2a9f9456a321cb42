"""Conditional requests (RFC 9110 section 13): entity tags on reads, ``If-Match`` on commands.

A read of one resource carries a strong ``ETag``, a digest of the bytes it
answers, so the tag changes exactly when the representation does (a new
payment listed on its order, an operation that finished), with no version
column to keep in step with every writer. A client that sends the tag back
in ``If-None-Match`` gets ``304 Not Modified`` and no body while nothing
changed: cheap polling.

A command that changes an existing resource accepts ``If-Match``: it runs
only if the resource still has one of the tags (``*``: if it exists at
all), and is refused with ``412 PreconditionFailed`` otherwise. The
command checks it under its own lock on the resource, so of two commands
sent with the same tag, the second sees the first's change and is refused:
a lost update becomes a refusal the client can act on.
"""

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.http import HttpResponse, HttpResponseNotModified
from django.utils.http import parse_etags
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from api.errors import ApplicationError

T = TypeVar("T")

# Headers a 304 repeats from the 200 it stands for (RFC 9110 section 15.4.5),
# and Retry-After, which tells a client polling an operation when to ask again.
_KEPT_BY_NOT_MODIFIED = ("ETag", "Cache-Control", "Vary", "Retry-After")


class PreconditionFailed(ApplicationError):
    status_code = 412
    code = "PreconditionFailed"
    title = "Precondition failed"
    default_message = "The resource has changed since the ETag you sent in If-Match; read it again."


def entity_tag(content: bytes) -> str:
    """A strong ETag of a representation: 128 bits of its SHA-256, quoted."""
    return f'"{hashlib.sha256(content).hexdigest()[:32]}"'


def entity_tag_of(data: Any) -> str:
    """The ETag a read answers for ``data``, rendered as the read renders it by default."""
    return entity_tag(JSONRenderer().render(data))


def conditional_read(method: Callable[..., Any]) -> Callable[..., HttpResponse]:
    """Give a read's ``200`` a strong ``ETag``, and answer ``304`` to a matching ``If-None-Match``.

    ``If-None-Match`` compares weakly (RFC 9110 section 13.1.2): ``W/"x"``
    matches ``"x"``. The tag is of the body as served; a client that asks
    for indented JSON gets other bytes and so another tag.
    """

    @functools.wraps(method)
    def wrapper(view: APIView, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        response = method(view, request, *args, **kwargs)
        response = view.finalize_response(request, response, *args, **kwargs)
        response.render()
        if response.status_code != 200:
            return response
        tag = response["ETag"] = entity_tag(response.content)
        if _weak_match(request.headers.get("If-None-Match"), tag):
            return _not_modified(response)
        return response

    return wrapper


def _weak_match(header: str | None, tag: str) -> bool:
    if header is None:
        return False
    tags = parse_etags(header)
    return tags == ["*"] or tag in {t.removeprefix("W/") for t in tags}


def _not_modified(response: HttpResponse) -> HttpResponse:
    not_modified = HttpResponseNotModified()
    for name in _KEPT_BY_NOT_MODIFIED:
        if response.has_header(name):
            not_modified[name] = response[name]
    return not_modified


@dataclass(frozen=True)
class IfMatch(Generic[T]):
    """A command's ``If-Match``: the version of the resource the client means to change.

    ``tag_of`` gives the resource's current ETag, the one its read answers.
    """

    tags: frozenset[str]
    tag_of: Callable[[T], str]

    @classmethod
    def of(cls, request: Request, *, tag_of: Callable[[T], str]) -> "IfMatch[T] | None":
        """The request's ``If-Match``, or None when it sent none.

        A header that holds no tag (``If-Match: abc``) can never match, so it
        is kept as an empty set and refused like a stale tag.
        """
        header = request.headers.get("If-Match")
        if header is None:
            return None
        return cls(tags=frozenset(parse_etags(header)), tag_of=tag_of)

    def check(self, resource: T | None) -> T:
        """``resource``, if it exists and has one of the tags (any, for ``*``).

        Strong comparison (RFC 9110 section 13.1.1): a weak tag never matches.

        :raises PreconditionFailed: it does not exist, or has changed.
        """
        if resource is None:
            raise PreconditionFailed("There is nothing here for If-Match to match.")
        if "*" not in self.tags and self.tag_of(resource) not in self.tags:
            raise PreconditionFailed()
        return resource
