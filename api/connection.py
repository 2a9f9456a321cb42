"""How the application tells the server to close the connection after its answer.

A body the application refuses without reading it to its end (one over the
limit, one cut short) leaves the connection at an unknown point of the
client's bytes: no next request can be read from it. The server then
closes it, and the contract (§2, RFC 9112 §9.6) wants that said in the
answer, ``Connection: close``, or a pooled client sends its next, unrelated
request on a connection that is already gone.

WSGI forbids the application hop-by-hop headers such as ``Connection``
(PEP 3333), and gunicorn drops them. So the application marks the request's
environ instead, and gunicorn's worker (:mod:`api.gunicorn_worker`) makes
gunicorn close, and say so, when it sees the mark. Under another server the
mark is ignored.

Plain Python, free of Django: the worker is loaded before Django is.
"""

from collections.abc import MutableMapping
from typing import Any

# The environ key; its value is True when the connection must close.
CLOSE_CONNECTION = "order_service.close_connection"


def close_after_answer(environ: MutableMapping[str, Any]) -> None:
    """Ask the server to close the connection after this request's answer, and announce it."""
    environ[CLOSE_CONNECTION] = True


def must_close(environ: MutableMapping[str, Any]) -> bool:
    return environ.get(CLOSE_CONNECTION) is True
