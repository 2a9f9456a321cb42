"""A webhook receiver: a real HTTP server in the test, recording what it is sent."""

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    # The status it was answered.
    status: int


# Given how many requests came before this one, the status to answer.
Answer = Callable[[int], int]


def always(status: int) -> Answer:
    return lambda _: status


OK = always(200)


class Receiver:
    """Answers each POST as ``answer`` says, after ``delay`` seconds; keeps every request."""

    def __init__(self, answer: Answer = OK, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.received: list[Received] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if receiver.delay:
                    time.sleep(receiver.delay)
                with receiver._arrived:
                    status = receiver.answer(len(receiver.received))
                    receiver.received.append(
                        Received(
                            self.path, {k.lower(): v for k, v in self.headers.items()}, body, status
                        )
                    )
                    receiver._arrived.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """The first ``count`` requests, once they have all arrived."""
        with self._arrived:
            arrived = self._arrived.wait_for(lambda: len(self.received) >= count, timeout)
            assert arrived, f"{len(self.received)} of {count} requests arrived"
            return list(self.received[:count])


@contextmanager
def receiving(answer: Answer = OK, delay: float = 0.0) -> Iterator[Receiver]:
    receiver = Receiver(answer, delay)
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join()


class Hostile:
    """A receiver that takes every request and never answers it in time, as ``pace`` says.

    ``trickle``: the status line a byte at a time, each byte well within any
    read timeout, for as long as the client stays. ``silent``: nothing at
    all. ``endless``: a 200 at once, then a body without end. ``connections``
    counts what came in; ``closed`` is set as the last connection ends.
    """

    PACES = ("trickle", "silent", "endless")

    def __init__(self, pace: str, *, every: float = 0.2) -> None:
        assert pace in self.PACES, pace
        self.pace = pace
        self.every = every
        self.connections = 0
        self.closed = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        # accept() wakes up to see whether the test is over.
        self._listener.settimeout(0.2)
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/hooks"

    def serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self.closed.clear()
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        chunks = {
            "trickle": itertools.repeat(b"H"),
            "silent": itertools.repeat(b""),
            "endless": itertools.chain(
                [b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n"],
                itertools.repeat(b"x" * 1024),
            ),
        }[self.pace]
        with conn:
            try:
                conn.recv(65536)  # the request, or its start
                for chunk in chunks:
                    if chunk:
                        conn.sendall(chunk)
                    if self._stop.wait(self.every if self.pace != "endless" else 0.001):
                        return
                    if _gone(conn):
                        return
            except OSError:
                pass  # the client went away: what the bound is for
            finally:
                self.closed.set()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


def _gone(conn: socket.socket) -> bool:
    """Whether the client has closed the connection (a silent server sees it no other way).

    What the client sent is read and dropped on the way: the rest of its
    request, if the first read got only its start.
    """
    try:
        while conn.recv(65536, socket.MSG_DONTWAIT):
            pass
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


@contextmanager
def hostile(pace: str, *, every: float = 0.2) -> Iterator[Hostile]:
    receiver = Hostile(pace, every=every)
    thread = threading.Thread(target=receiver.serve, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.close()
        thread.join(timeout=5)
