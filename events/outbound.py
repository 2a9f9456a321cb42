"""One outbound HTTP request with a bound on the whole of it, not only on each phase.

An HTTP client's timeouts bound each phase: connecting, each write, and
each read. A receiver that sends its answer a byte every few seconds, each
byte within the read timeout, keeps a request open for as long as it likes:
one attempt at a webhook held a worker for 55 to 60 s with a timeout of 10 s.
So every socket operation here gets what is left of one deadline, never more
(:class:`_DeadlineStream`): connecting, the TLS handshake, sending, and
reading the answer's head together take at most ``timeout`` seconds,
however the receiver paces them. The body is never read: a receiver's
answer is its status, and an endless body costs nothing.

The request is made with httpcore, the transport under httpx, whose network
backend is the one seam where every socket operation passes.
"""

import ssl
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpcore
import httpx


class Unanswered(Exception):
    """No status came back. ``str()`` says what happened, in words for the receiver's owner.

    The network's own account (an errno, a TLS alert) is ``detail``, for the
    log: a tenant is told what happened at its endpoint, not how our hosts
    see the network.
    """

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


def post(
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    timeout: float,
    sni_hostname: str | None = None,
) -> int:
    """POST ``content`` to ``url``; the answer's status code, within ``timeout`` seconds in all.

    No proxy from the environment, no redirect followed, no credentials
    from ``.netrc``: the request goes where ``url`` says and nowhere else.

    :raises Unanswered: no status within ``timeout``, or no connection.
    """
    deadline = time.monotonic() + timeout
    extensions: dict[str, Any] = {
        "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    }
    if sni_hostname is not None:
        extensions["sni_hostname"] = sni_hostname
    try:
        with (
            httpcore.ConnectionPool(
                ssl_context=httpx.create_ssl_context(trust_env=False),
                network_backend=_DeadlineBackend(deadline),
                max_connections=1,
            ) as pool,
            pool.stream(
                "POST", url, headers=list(headers.items()), content=content, extensions=extensions
            ) as response,
        ):
            return int(response.status)
    except httpcore.TimeoutException as exc:
        raise Unanswered(f"No answer within {timeout:g} s.", repr(exc)) from None
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        raise Unanswered(_said(exc), repr(exc.__context__ or exc)) from None


def _said(exc: Exception) -> str:
    cause = exc.__context__
    if isinstance(cause, ConnectionRefusedError):
        return "The endpoint refused the connection."
    if isinstance(cause, ssl.SSLCertVerificationError):
        return "The endpoint's TLS certificate was not accepted."
    if isinstance(cause, ssl.SSLError):
        return "The TLS handshake with the endpoint failed."
    if isinstance(exc, httpcore.ProtocolError):
        return "The endpoint's answer was not HTTP."
    return "The connection to the endpoint failed."


class _Deadline:
    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def _left(self, timeout: float | None) -> float:
        """What is left of the deadline, at most ``timeout``."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("The request's time is up.")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream(_Deadline, httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        super().__init__(deadline)
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._left(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        secured = self._stream.start_tls(ssl_context, server_hostname, self._left(timeout))
        return _DeadlineStream(secured, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(_Deadline, httpcore.NetworkBackend):
    def __init__(self, deadline: float) -> None:
        super().__init__(deadline)
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(
            host, port, self._left(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("Only TCP is called.")

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, max(self._deadline - time.monotonic(), 0.0)))
