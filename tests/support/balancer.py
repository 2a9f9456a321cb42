"""Real HAProxy, with the configuration users run, in front of several nodes.

deploy/haproxy/haproxy.cfg finds the web replicas by DNS: in Compose,
Docker's embedded DNS answers the service's name with every replica's
address. Here a small DNS server in this process stands in for Docker's: it
answers that name with the nodes' addresses. So that one name can name
them all, as it does in Compose, each node listens on a loopback address of
its own (127.0.0.2, 127.0.0.3, ..., all of them the local machine on Linux)
and all on one port, as replicas on a Compose network each have an address
and share the port. HAProxy then runs the very file users run,
``server-template`` and ``resolvers`` included; only the environment
variables the file documents differ.

Which node answered what is read from HAProxy's own counters of the
requests it forwarded to each server, through its master CLI. That CLI is
opened on the command line (``-S``), so no line of the configuration is
the test's own.
"""

import socket
import socketserver
import struct
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.support import servers
from tests.support.live import ROOT, LiveService
from tests.support.waits import Answer, describe, wait_until

HAPROXY = Path("/usr/sbin/haproxy")
CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
# The backend and the replicas' DNS name in CONFIG (its WEB_ADDRESS default).
BACKEND = "web"
SERVICE_NAME = "web"


def port_free_on_every_address() -> int:
    """A port no socket uses on any address, so that each node can take it on its own."""
    with socket.socket() as sock:
        # The wildcard address conflicts with every address's use of the port.
        sock.bind(("0.0.0.0", 0))  # noqa: S104 (bound only to be released)
        return int(sock.getsockname()[1])


class _StaticDns(socketserver.ThreadingUDPServer):
    """Answers A queries for one name with fixed addresses, as Docker's DNS does for a service."""

    daemon_threads = True

    def __init__(self, name: str, addresses: Sequence[str]) -> None:
        self.name = name.lower()
        self.addresses = list(addresses)
        super().__init__(("127.0.0.1", 0), _DnsHandler)


class _DnsHandler(socketserver.BaseRequestHandler):
    server: _StaticDns

    def handle(self) -> None:
        query, sock = self.request
        answer = _answer(query, self.server.name, self.server.addresses)
        if answer is not None:
            sock.sendto(answer, self.client_address)


def _answer(query: bytes, name: str, addresses: Sequence[str]) -> bytes | None:
    """The response to one DNS query (RFC 1035 section 4), or None for what is not one."""
    if len(query) < 12:
        return None
    ident, flags, questions = struct.unpack("!HHH", query[:6])
    if questions != 1:
        return None
    labels, offset = [], 12
    while offset < len(query) and (length := query[offset]):
        labels.append(query[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    question_end = offset + 5  # the terminating zero, QTYPE, QCLASS
    if question_end > len(query):
        return None
    qtype, qclass = struct.unpack("!HH", query[offset + 1 : question_end])
    known = ".".join(labels).lower() == name
    records = addresses if known and (qtype, qclass) == (1, 1) else []
    # QR, AA, the client's RD, RA; NXDOMAIN for any other name.
    response_flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | (0 if known else 3)
    header = struct.pack("!HHHHHH", ident, response_flags, 1, len(records), 0, 0)
    # Each answer names the question's name by a pointer to it (offset 12).
    answers = b"".join(
        struct.pack("!HHHIH", 0xC00C, 1, 1, 1, 4) + socket.inet_aton(address) for address in records
    )
    return header + query[12:question_end] + answers


@dataclass(frozen=True)
class ServerStat:
    """One server slot of the backend, as HAProxy's ``show stat`` reports it."""

    name: str
    status: str
    # The last health check's result: L7OK once the node answered /healthz.
    check: str
    address: str
    forwarded: int


@dataclass(frozen=True)
class Balancer:
    service: LiveService
    master_socket: Path

    def servers(self) -> list[ServerStat]:
        """Every server slot of the backend (the ones without an address are in MAINT)."""
        rows = self.command("@1 show stat").splitlines()
        columns = rows[0].removeprefix("# ").split(",")
        stats = [dict(zip(columns, row.split(","), strict=False)) for row in rows[1:] if row]
        return [
            ServerStat(
                name=stat["svname"],
                status=stat["status"],
                check=stat["check_status"],
                address=stat["addr"],
                forwarded=int(stat["stot"] or 0),
            )
            for stat in stats
            if stat["pxname"] == BACKEND and stat["svname"] not in ("FRONTEND", "BACKEND")
        ]

    def forwarded(self) -> dict[str, int]:
        """Requests forwarded so far to each node (host:port), by HAProxy's count."""
        return {s.address: s.forwarded for s in self.servers() if s.address}

    def command(self, line: str) -> str:
        """One command on the master CLI (``@1``: to the worker process); its output."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.master_socket))
            # The master CLI keeps the connection open after a command
            # routed to a worker: "quit" closes it once the answer is out.
            sock.sendall(line.encode() + b"; quit\n")
            output = bytearray()
            while chunk := sock.recv(65536):
                output += chunk
        return output.decode()


@contextmanager
def balance(nodes: Sequence[LiveService], *, within_s: float = 30) -> Iterator[Balancer]:
    """HAProxy, with deploy/haproxy/haproxy.cfg, round robin over ``nodes``; stopped on exit.

    The nodes must share a port, each on an address of its own (see above).
    Yields once every node is in rotation (its health checks passed), or, for
    no node, once HAProxy answers.
    """
    hosts = [node.address[0] for node in nodes]
    ports = {node.address[1] for node in nodes}
    assert len(set(hosts)) == len(hosts), "each node needs an address of its own"
    assert len(ports) <= 1, "the nodes must share a port, as replicas do"
    # With no node, DNS names nothing and the port is never used.
    port = ports.pop() if ports else 8000
    listen = port_free_on_every_address()
    dns = _StaticDns(SERVICE_NAME, hosts)
    threading.Thread(target=dns.serve_forever, daemon=True).start()
    env = {
        "BALANCER_BIND": f"127.0.0.1:{listen}",
        "WEB_ADDRESS": f"{SERVICE_NAME}:{port}",
        "DNS_NAMESERVER": f"127.0.0.1:{dns.server_address[1]}",
    }
    try:
        with servers.workspace("haproxy-") as workdir:
            master_socket = workdir / "master.sock"
            # -W -db: master-worker mode in the foreground, as the haproxy image runs it.
            process = servers.start(
                "haproxy",
                [str(HAPROXY), "-W", "-db", "-S", str(master_socket), "-f", str(CONFIG)],
                log=workdir / "haproxy.log",
                env=env,
            )
            try:
                balancer = Balancer(
                    service=LiveService(base_url=f"http://127.0.0.1:{listen}"),
                    master_socket=master_socket,
                )
                nodes_in_rotation = {f"{host}:{port}" for host in hosts}
                _wait_until_ready(balancer, process, nodes_in_rotation, within_s)
                yield balancer
            finally:
                servers.stop([process])
    finally:
        dns.shutdown()
        dns.server_close()


def _wait_until_ready(
    balancer: Balancer, process: subprocess.Popen[bytes], nodes: set[str], within_s: float
) -> None:
    def ready() -> Answer:
        assert process.poll() is None, f"haproxy exited\n{servers.evidence()}"
        # A server is UP from the moment DNS gives it an address, before
        # any check: a passed check is the sign it is in rotation.
        slots = balancer.servers()
        up = {s.address for s in slots if (s.status, s.check) == ("UP", "L7OK")}
        seen = ", ".join(f"{s.name} {s.address or '-'} {s.status} {s.check}" for s in slots)
        if up != nodes:
            return Answer(False, seen)
        answer = requests.get(balancer.service.url("/healthz"), timeout=5)
        return Answer(True, describe(answer))

    # HAProxy signals nothing when it resolves a name or a check passes: its
    # statistics are polled (the CLI socket or the port may not be open yet),
    # and then its port.
    wait_until(
        ready,
        within_s,
        interval=0.05,
        what=f"haproxy putting {sorted(nodes)} in rotation",
        ignoring=(OSError,),
    )
