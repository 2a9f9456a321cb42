"""What an answer leaves of a kept-alive connection, seen on a raw socket.

The contract (§2) wants every answer to tell the truth about the
connection: ``Connection: close`` and then the server closes it, or no such
word and the same connection serves the next request. A pooled client
(httpx, requests) believes the header: it sends its next, unrelated
request on a connection the answer called kept-alive.
"""

import re
import socket
import threading
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass

from tests.support.edge import RawResponse, parse_response
from tests.support.live import LiveService

# The request sent on the same connection after the one under test.
NEXT_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@dataclass(frozen=True)
class Afterwards:
    """An answer and the fate of its connection."""

    # None: the server closed without answering.
    answer: RawResponse | None
    # The server closed the connection after its answer (or instead of one).
    closed: bool
    # The status the same connection then gave NEXT_REQUEST; None if not asked.
    next_status: int | None

    @property
    def announced_close(self) -> bool:
        return self.answer is not None and self.answer.headers.get("connection") == "close"

    def assert_truthful(self) -> None:
        """The answer said close and the server closed, or it did not and the connection served."""
        if self.answer is None or self.announced_close:
            assert self.closed, "the answer said Connection: close but the server kept it open"
        else:
            assert self.next_status == 200, (
                "the answer kept the connection alive but it served no next request: "
                f"{self.answer.headers.get('connection')!r}, then {self.next_status}"
            )


def answer_then_reuse(
    service: LiveService,
    head: bytes,
    body: Iterable[bytes] = (),
    *,
    half_close: bool = False,
    timeout: float = 15,
) -> Afterwards:
    """Send one request on a new connection, read its answer, then see what is left of it.

    The body is sent from a thread of its own, as a client that reads while
    it writes: a server may answer before it has read the body, and stop
    reading it. ``half_close`` ends the sending side after the body, as a
    client that has nothing more to send does; no next request can then be
    sent, and only whether the server closes is seen.
    """
    with socket.create_connection(service.address, timeout=timeout) as sock:
        sock.sendall(head)
        sent = threading.Thread(target=_send, args=(sock, body, half_close), daemon=True)
        sent.start()
        data, ended = _read_one_answer(sock)
        answer = _parse(data) if data else None
        next_status = None
        if ended:
            closed = True
        elif answer is None or answer.headers.get("connection") == "close" or half_close:
            closed = _closes(sock)
        else:
            sent.join(timeout)
            closed = False
            with suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(NEXT_REQUEST)
            following, closed = _read_one_answer(sock)
            next_status = _parse(following).status if following else None
        sent.join(timeout)
        assert not sent.is_alive(), "the body could not be sent within the timeout"
    return Afterwards(answer=answer, closed=closed, next_status=next_status)


def _send(sock: socket.socket, body: Iterable[bytes], half_close: bool) -> None:
    # A server that answered early may close while the rest is still on its way.
    with suppress(BrokenPipeError, ConnectionResetError, socket.timeout):
        for piece in body:
            sock.sendall(piece)
        if half_close:
            sock.shutdown(socket.SHUT_WR)


def _read_one_answer(sock: socket.socket) -> tuple[bytes, bool]:
    """One answer with a Content-Length (or what came before the end); whether the server ended."""
    received = bytearray()
    while not _complete(received):
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(received), True
        if not chunk:
            return bytes(received), True
        received += chunk
    return bytes(received), False


_CHUNKED = re.compile(rb"(?im)^transfer-encoding:\s*chunked\s*$")


def _complete(data: bytearray) -> bool:
    head, found, body = bytes(data).partition(b"\r\n\r\n")
    if found and _CHUNKED.search(head):
        # gunicorn sends no trailers.
        return body.endswith(b"0\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    return bool(found and length and len(body) >= int(length.group(1)))


def _parse(data: bytes) -> RawResponse:
    """An answer with a Content-Length or chunked (Django leaves some answers unsized)."""
    response = parse_response(data)
    if response.headers.get("transfer-encoding") != "chunked":
        return response
    body, rest = bytearray(), response.body
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return RawResponse(status=response.status, headers=response.headers, body=bytes(body))
        body += rest[:size]
        rest = rest[size + 2 :]


def _closes(sock: socket.socket) -> bool:
    """Whether the server ends the connection (a FIN or a reset) within the socket's timeout.

    Anything it still sends first is read and dropped.
    """
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True
