"""Faults on demand: a TCP proxy that drops answers, goes down or stalls, and servers to restart.

``FaultProxy`` stands between a client and a server and misbehaves as the test
tells it to. ``PostgresCluster`` and ``RedisServer`` are throwaway servers of
the test's own, which it may stop and start without touching the suite's.
``RabbitVhost`` is a virtual host of the test's own on the machine's RabbitMQ:
its own queues, never another test's.
"""

import enum
import math
import os
import queue
import random
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Self

import psycopg
from psycopg import sql

from tests.support import servers
from tests.support.live import free_port
from tests.support.waits import Answer, describe, wait_until

HOST = "127.0.0.1"
# How long a proxy thread blocks in a socket call before it looks again at
# the mode and at its connection's state.
_POLL_S = 0.05
_CHUNK = 64 * 1024


class _Closes:
    """``with`` support: leaving the block calls ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close()


class Mode(enum.Enum):
    """What a ``FaultProxy`` does to the traffic, and the fault that simulates."""

    PASS = "pass"
    """Forwards both ways: a healthy network."""
    DROP_ANSWERS = "drop_answers"
    """Loses some answers on the way back: the server did the work, its client sees a reset."""
    DOWN = "down"
    """The server is down: connects are refused, open connections are reset."""
    STALL = "stall"
    """A partition or a hung server: connections stay open and nothing gets through."""


class Fate(enum.Enum):
    """What ``DROP_ANSWERS`` does to one connection."""

    PASS = "pass"
    DROP = "drop"
    """Its request goes upstream and is answered; the answer is discarded, both sides reset."""
    RESET = "reset"
    """Reset as soon as it is accepted: its request never reaches the server."""


@dataclass(frozen=True)
class Shares:
    """The share of answers ``DROP_ANSWERS`` drops, and the share of connections it resets.

    ``drop`` is a share of the answered connections (those not reset):
    after every connection, at least that share of them lost their answer,
    and at most one more than that, so a run's figures are the share asked
    for whenever it stops, not a coin's luck. ``reset`` is a share of all
    connections, kept the same way. Within those bounds, which connection
    gets which fate is drawn at random (``seed`` repeats a draw).
    """

    drop: float
    reset: float = 0.0
    seed: int | None = None

    def deal(self) -> Iterator[Fate]:
        rng = random.Random(self.seed)
        resets, drops = _Quota(self.reset, rng), _Quota(self.drop, rng)
        while True:
            if resets.take():
                yield Fate.RESET
            else:
                yield Fate.DROP if drops.take() else Fate.PASS


class _Quota:
    """Yes for a share of the draws: at least share * draws (rounded up), at most one more."""

    def __init__(self, share: float, rng: random.Random) -> None:
        if not 0 <= share <= 1:
            raise ValueError("a share is between 0 and 1")
        self.share, self.rng = share, rng
        self.draws = self.yeses = 0

    def take(self) -> bool:
        self.draws += 1
        # The least count of yeses that keeps the share; a hair below an
        # integer is that integer (0.3 * 10 is 3.0000000000000004).
        least = math.ceil(self.share * self.draws - 1e-9)
        if self.yeses < least:
            yes = True
        elif self.yeses > least or self.share == 0:
            yes = False
        else:
            yes = self.rng.random() < self.share
        self.yeses += yes
        return yes


def _every(n: int) -> Iterator[Fate]:
    """The 1st, (1 + n)th, (1 + 2n)th… connection dropped."""
    while True:
        yield Fate.DROP
        yield from [Fate.PASS] * (n - 1)


@dataclass(eq=False)
class _Link:
    """A client's connection and the proxy's connection upstream for it."""

    client: socket.socket
    upstream: socket.socket
    doomed: bool  # its answer is to be dropped (DROP_ANSWERS)
    fins: int = 0  # directions that have passed on their FIN
    closed: bool = False


class FaultProxy(_Closes):
    """A TCP proxy on 127.0.0.1 in front of ``upstream``, its mode switched while it runs.

    It knows no protocol: HTTP and Redis clients alike go through it. One
    thread accepts connections and two threads per connection forward a
    direction each, on blocking sockets with a short timeout, so that each
    sees a mode switch at once. Setting ``mode`` returns once the new mode is
    in force: the bytes that reach the proxy from then on obey it.

    - ``PASS`` forwards both ways.
    - ``DROP_ANSWERS`` dooms the 1st, (1 + n)th, (1 + 2n)th… connection accepted
      while it is set (n = ``drop_every``, counted afresh at each switch): the
      client's bytes go upstream, then the first bytes of the answer are
      discarded and both connections reset. ``dropped`` counts these. Given
      ``shares`` instead, it drops and resets those shares of the
      connections (:class:`Shares`); ``reset`` counts the resets.
    - ``DOWN`` resets every open connection and closes the listening socket,
      so that connects are refused. A bound socket that never listens keeps
      the port meanwhile: no other socket can take it.
    - ``STALL`` forwards nothing, on open connections and on new ones (which
      are accepted); when the mode switches back, the bytes held go on.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        mode: Mode = Mode.PASS,
        drop_every: int = 1,
        shares: Shares | None = None,
    ) -> None:
        self.upstream = upstream
        self.dropped = 0
        self.reset = 0
        self.accepted = 0
        self._deal = shares.deal if shares is not None else lambda: _every(drop_every)
        self._fates = self._deal()
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._acceptor: threading.Thread | None = None
        self._placeholder = _port_sharing_socket()
        self._placeholder.bind((HOST, 0))
        self.port: int = self._placeholder.getsockname()[1]
        self._mode = Mode.DOWN
        self.mode = mode

    @property
    def address(self) -> tuple[str, int]:
        return HOST, self.port

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        previous, self._mode = self._mode, mode
        self._fates = self._deal()
        if mode is Mode.DOWN:
            if self._acceptor is not None:
                self._acceptor.join()  # it closes the listening socket on seeing DOWN
            with self._lock:
                links = list(self._links)
            for link in links:
                self._end(link, reset=True)
        elif previous is Mode.DOWN:
            listener = _port_sharing_socket()
            listener.bind(self.address)
            listener.listen()
            listener.settimeout(_POLL_S)
            self._acceptor = _start(self._accept, listener)

    def close(self) -> None:
        """Reset every connection and stop listening for good."""
        self.mode = Mode.DOWN
        self._placeholder.close()

    def _accept(self, listener: socket.socket) -> None:
        """Accept connections and start forwarding them until DOWN; then close ``listener``."""
        with listener:
            while self._mode is not Mode.DOWN:
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                self.accepted += 1
                fate = next(self._fates) if self._mode is Mode.DROP_ANSWERS else Fate.PASS
                if fate is Fate.RESET:
                    self.reset += 1
                    _abort(client)
                    continue
                try:
                    upstream = socket.create_connection(self.upstream, timeout=5)
                except OSError:
                    _abort(client)  # the upstream is down: its client sees a reset
                    continue
                link = _Link(client, upstream, doomed=fate is Fate.DROP)
                with self._lock:
                    self._links.add(link)
                for src, dst in ((client, upstream), (upstream, client)):
                    src.settimeout(_POLL_S)
                    # Bytes go on as they come: Nagle's algorithm would hold small writes back.
                    src.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    _start(self._forward, link, src, dst)

    def _forward(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        """Pass ``src``'s bytes on to ``dst``, then its FIN, unless the link is reset first."""
        try:
            while not link.closed:
                try:
                    data = src.recv(_CHUNK)
                except TimeoutError:
                    continue
                # The mode is read after the bytes: those that arrive once it
                # is set obey it, whatever this thread was doing at the switch.
                while self._mode is Mode.STALL and not link.closed:
                    time.sleep(_POLL_S)
                if link.closed:
                    return
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    self._end(link, reset=False)
                    return
                if src is link.upstream and link.doomed and self._mode is Mode.DROP_ANSWERS:
                    self._end(link, reset=True, dropped=True)
                    return
                _send_all(dst, data, given_up=lambda: link.closed)
        except OSError:
            # One side reset or went away: the other is reset too, as by a real cut.
            self._end(link, reset=True)

    def _end(self, link: _Link, *, reset: bool, dropped: bool = False) -> None:
        """Reset both connections now, or close them once each direction has passed on its FIN."""
        with self._lock:
            if not reset:
                link.fins += 1
            if link.closed or (not reset and link.fins < 2):
                return
            link.closed = True
            self._links.discard(link)
            self.dropped += dropped
        for sock in (link.client, link.upstream):
            if reset:
                _abort(sock)
            else:
                sock.close()


class DelayedLink(_Closes):
    """A TCP proxy on 127.0.0.1 that holds every byte ``delay_s`` before passing it on, both ways.

    It stands for a slow link, or a sender that runs behind: what a server
    wrote reaches its peer ``delay_s`` later. The bytes it holds belong to
    the machine of the server it fronts: ``close()`` resets every
    connection and drops them, as that machine's death would. Bytes are
    pipelined, not paced: the delay adds latency, not a bandwidth limit.
    """

    def __init__(self, upstream: tuple[str, int], *, delay_s: float) -> None:
        self.upstream, self.delay_s = upstream, delay_s
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = _port_sharing_socket()
        self._listener.bind((HOST, 0))
        self._listener.listen()
        self._listener.settimeout(_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        _start(self._accept)

    @property
    def address(self) -> tuple[str, int]:
        return HOST, self.port

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _abort(sock)
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _abort(client)
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                src.settimeout(_POLL_S)
                src.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                held: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()
                _start(self._hold, src, held)
                _start(self._pass_on, held, dst)

    def _hold(self, src: socket.socket, held: "queue.SimpleQueue[tuple[float, bytes]]") -> None:
        """Read ``src`` and queue each chunk with the moment it may go on (b"" at its end)."""
        data = b"-"
        while data and not self._closed.is_set():
            try:
                data = src.recv(_CHUNK)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            held.put((time.monotonic() + self.delay_s, data))

    def _pass_on(self, held: "queue.SimpleQueue[tuple[float, bytes]]", dst: socket.socket) -> None:
        """Send each queued chunk once it is due; pass its end on as a FIN."""
        while not self._closed.is_set():
            try:
                due, data = held.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            # The delay itself, not a wait for an event: the link is slow.
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                _send_all(dst, data, given_up=self._closed.is_set)
            except OSError:
                return


def _port_sharing_socket() -> socket.socket:
    sock = socket.socket()
    # The placeholder and each listener bind the same port, and a listener
    # binds it again over the TIME_WAIT of the connections it served.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def _start(target: Callable[..., None], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _send_all(sock: socket.socket, data: bytes, *, given_up: Callable[[], bool]) -> None:
    """``sock.sendall(data)`` on a socket with a timeout, until ``given_up()``."""
    # Not sendall itself: on a timeout it does not tell how much it sent.
    view = memoryview(data)
    while view and not given_up():
        with suppress(TimeoutError):
            view = view[sock.send(view) :]


def _abort(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (RST), which the peer sees at once as an error."""
    # SO_LINGER on with a zero timeout: close() discards unsent bytes and resets.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _program(name: str) -> str:
    """The path of program ``name``, found on PATH."""
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} is not on PATH")
    return path


@cache
def postgres_bindir() -> Path:
    """The directory of initdb and pg_ctl (which Debian keeps off PATH)."""
    bindir = subprocess.run([_program("pg_config"), "--bindir"], capture_output=True, check=True)
    return Path(bindir.stdout.decode().strip())


class PostgresCluster(_Closes):
    """A throwaway PostgreSQL server on 127.0.0.1 and a free port, started on creation.

    Its data, Unix socket and log are in a temporary directory. The superuser
    ``postgres`` connects without a password; fsync is off, for the data is
    thrown away. The server runs in the foreground, a child of the test, so
    that how it ended is known (tests/support/servers.py). ``stop()`` and
    ``start()`` restart it on the same port and data; ``close()`` stops it
    and removes the directory, unless a test failed.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.directory = servers.workdir("faults-pg-")
        self._data = str(self.directory / "data")
        self._log = self.directory / "server.log"
        self._process: subprocess.Popen[bytes] | None = None
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")  # the server's user writes in it
        try:
            initdb = ("-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
            self._run("initdb", "-D", self._data, *initdb)
            self.start()
        except BaseException:
            self.close(keep=True)
            raise

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close(keep=exc_type is not None)

    def url(self, dbname: str = "postgres") -> str:
        """The URL of database ``dbname``, over TCP, as the superuser."""
        return f"postgres://postgres@{HOST}:{self.port}/{dbname}"

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def start(self) -> None:
        """Start the server; returns once it accepts connections."""
        # -F: fsync off; -k: the Unix socket in the directory, not /var/run/postgresql.
        options = ("-F", "-h", HOST, "-p", str(self.port), "-k", str(self.directory))
        self._process = process = servers.start(
            "postgresql",
            [str(postgres_bindir() / "postgres"), "-D", self._data, *options],
            log=self._log,
            cwd=self.directory,  # the postgres user may not enter the test's own
            **servers.as_user("postgres"),
        )

        def accepting() -> bool:
            assert process.poll() is None, f"postgresql exited\n{servers.evidence()}"
            with psycopg.connect(self.url(), connect_timeout=2):
                return True

        wait_until(
            accepting,
            30,
            interval=0.02,
            what=f"PostgreSQL on port {self.port} accepting connections",
            ignoring=(psycopg.OperationalError,),
        )

    def stop(self) -> None:
        """Stop the server (fast: sessions end at once); returns once it has exited."""
        if self._process is not None:
            servers.stop([self._process], how=signal.SIGINT)  # PostgreSQL's fast shutdown
            self._process = None

    def close(self, *, keep: bool = False) -> None:
        """Stop the server at once; remove its directory, unless ``keep`` (a failure)."""
        if self._process is not None:
            servers.stop([self._process], how=signal.SIGQUIT)  # PostgreSQL's immediate shutdown
            self._process = None
        servers.discard(self.directory, keep=keep)

    def _run(self, program: str, *args: str) -> None:
        argv = [str(postgres_bindir() / program), *args]
        done = subprocess.run(
            argv,
            cwd=self.directory,
            capture_output=True,
            text=True,
            check=False,
            **servers.as_user("postgres"),
        )
        assert done.returncode == 0, (
            f"{' '.join(argv)} exited with status {done.returncode}:\n{done.stdout}{done.stderr}"
        )


class RedisServer(_Closes):
    """A throwaway redis-server on 127.0.0.1 and a free port, without persistence.

    Started on creation; ``stop()`` and ``start()`` restart it on the same
    port, empty. ``close()`` ends it and removes its temporary directory,
    unless a test failed.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.directory = servers.workdir("faults-redis-")
        self._process: subprocess.Popen[bytes] | None = None
        try:
            self.start()
        except BaseException:
            self.close(keep=True)
            raise

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close(keep=exc_type is not None)

    def url(self, db: int = 0) -> str:
        """The URL of database number ``db``."""
        return f"redis://{HOST}:{self.port}/{db}"

    def start(self) -> None:
        """Start the server; returns once it answers PING."""
        self._process = process = servers.start(
            "redis-server",
            [
                _program("redis-server"),
                *("--bind", HOST, "--port", str(self.port), "--dir", str(self.directory)),
                # No persistence: a restart starts empty.
                *("--save", "", "--appendonly", "no"),
            ],
            log=self.directory / "redis.log",
        )

        def answering() -> Answer:
            assert process.poll() is None, f"redis-server exited\n{servers.evidence()}"
            return _answers_ping(self.port)

        # Redis tells systemd alone that it is ready: its port is polled.
        wait_until(answering, 10, interval=0.02, what=f"redis-server on port {self.port}")

    def stop(self) -> None:
        """End the server; returns once it has exited."""
        process, self._process = self._process, None
        if process is not None:
            servers.stop([process])

    def close(self, *, keep: bool = False) -> None:
        self.stop()
        servers.discard(self.directory, keep=keep)


def _answers_ping(port: int) -> Answer:
    try:
        with socket.create_connection((HOST, port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            answer = sock.recv(64)
    except OSError as error:
        return Answer(False, describe(error))
    return Answer(answer.startswith(b"+PONG"), repr(answer))


# The machine's RabbitMQ (.ci/run starts it if it is down), and the user
# rabbitmq-server creates on a fresh installation, which it admits from
# localhost alone.
RABBITMQ_PORT = 5672
RABBITMQ_USER = "guest"


class RabbitVhost(_Closes):
    """A virtual host of its own on the local RabbitMQ: queues that no other test sees.

    RabbitMQ's server is shared (it takes seconds to start, as an Erlang
    node); a virtual host is its unit of isolation, as a database is
    PostgreSQL's. ``close()`` deletes it, with whatever its queues hold.
    """

    def __init__(self) -> None:
        self.name = f"faults-{uuid.uuid4().hex[:12]}"
        _rabbitmqctl("add_vhost", self.name)
        try:
            _rabbitmqctl("set_permissions", "-p", self.name, RABBITMQ_USER, ".*", ".*", ".*")
        except BaseException:
            self.close()
            raise

    def url(self) -> str:
        return f"amqp://{RABBITMQ_USER}:{RABBITMQ_USER}@{HOST}:{RABBITMQ_PORT}/{self.name}"

    def close(self) -> None:
        _rabbitmqctl("delete_vhost", self.name)


class RabbitBroker(_Closes):
    """A RabbitMQ of the test's own to stop and start: a virtual host behind a :class:`FaultProxy`.

    The server is shared, so it is never stopped: ``stop()`` puts the proxy
    down (connections reset, connects refused), as a broker's clients see a
    stopped one, and ``start()`` lets them through again. Unlike a
    :class:`RedisServer` without persistence, it keeps its messages meanwhile,
    as a RabbitMQ restarted keeps its durable queues.
    """

    def __init__(self) -> None:
        self.vhost = RabbitVhost()
        try:
            self.proxy = FaultProxy((HOST, RABBITMQ_PORT))
        except BaseException:
            self.vhost.close()
            raise

    def url(self) -> str:
        return f"amqp://{RABBITMQ_USER}:{RABBITMQ_USER}@{HOST}:{self.proxy.port}/{self.vhost.name}"

    def stop(self) -> None:
        self.proxy.mode = Mode.DOWN

    def start(self) -> None:
        self.proxy.mode = Mode.PASS

    def close_connections(self) -> None:
        """RabbitMQ closes every connection to the virtual host, as at a restart.

        Each client is told (``CONNECTION_FORCED``) once it reads its socket,
        and the messages delivered to it and not acknowledged go back to
        their places in their queues.
        """
        _rabbitmqctl("close_all_connections", "-p", self.vhost.name, "closed by the test")

    def close(self) -> None:
        try:
            self.proxy.close()
        finally:
            self.vhost.close()


def _rabbitmqctl(*args: str) -> None:
    done = subprocess.run(
        [_program("rabbitmqctl"), "-q", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (
        f"rabbitmqctl {' '.join(args)} exited with {done.returncode}:"
        f" {done.stdout.strip()} {done.stderr.strip()}"
    )
