"""A webhook receiver: a real HTTP server in the test, recording what it is sent."""

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
