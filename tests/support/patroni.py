"""A replicated PostgreSQL under Patroni and etcd, as a deployment runs it: the real programs.

``PatroniCluster()`` starts an etcd and two Patroni nodes on this machine
(Debian's ``patroni`` and ``etcd-server``), each with its own ports and
data directory in a temporary directory, as the ``postgres`` user when the
tests run as root (PostgreSQL refuses root). Each logs to a file there
(``etcd.log``, ``pg0.log``: Patroni's lines and its PostgreSQL's), which a
failure shows the end of (tests/support/servers.py); a failed test keeps
the directory. Every node runs ``deploy/patroni/patroni.yml``, the
configuration a deployment uses, with its own settings in its environment,
as that file says; it reads a copy in the cluster's directory (see
:data:`CONFIG_COPY`). The first node
bootstraps the cluster and leads; the second copies it and streams from
it, as its synchronous standby unless ``synchronous=False``.

The service reaches whichever node is the primary through the multi-host
URL (:meth:`PatroniCluster.url`), as docs/DEPLOYING.md tells a deployment
to. A node can be killed as its machine would die (:meth:`PatroniNode.kill`),
stopped and started again; the cluster switched over through Patroni's
REST API, and its synchronous mode changed there, as ``patronictl`` does.
"""

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import psycopg
import requests
from psycopg import sql

from tests.support import servers
from tests.support.faults import DelayedLink, postgres_bindir
from tests.support.live import ROOT, free_port
from tests.support.waits import Answer, http_answer, wait_until

HOST = "127.0.0.1"
CONFIG = ROOT / "deploy" / "patroni" / "patroni.yml"
# Where the nodes read CONFIG: a copy, byte for byte, in the cluster's
# directory. Patroni runs as the postgres user, which may not reach the
# checkout (a clone in a `mktemp -d` directory is its owner's alone), and
# Patroni takes a file it cannot read for no file at all: its settings are
# then the environment's alone, and it exits at once (KeyError: 'username',
# the REST API's user being in the file). That is what made every Patroni
# scenario fail on CI's fresh clones.
CONFIG_COPY = "patroni.yml"
# HAProxy routing to the primary: the other way to reach it (docs/DEPLOYING.md).
HAPROXY = Path("/usr/sbin/haproxy")
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "patroni.cfg"
# Servers that refuse to run as root run as this user, who owns PostgreSQL on Debian.
_RUN_AS = "postgres"
# A cluster's first leader is elected, and its standby copied, within this.
_START_WITHIN_S = 90.0
# Patroni and etcd announce nothing a test could wait on but their HTTP
# answers: these are polled this often.
_POLL_S = 0.05


def _program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} is not on PATH (Debian's patroni and etcd-server)")
    return path


class Etcd:
    """One etcd member on loopback ports, its data in ``directory``: the cluster's DCS."""

    def __init__(self, directory: Path) -> None:
        self.port, peer_port = free_port(), free_port()
        self.log = directory / "etcd.log"
        peer = f"http://{HOST}:{peer_port}"
        client = f"http://{HOST}:{self.port}"
        self.process = servers.start(
            "etcd",
            [
                _program("etcd"),
                *("--name", "etcd0", "--data-dir", str(directory / "etcd")),
                *("--listen-client-urls", client, "--advertise-client-urls", client),
                *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
                *("--initial-cluster", f"etcd0={peer}"),
            ],
            log=self.log,
            cwd=directory,
            env={"PATH": "/usr/bin:/bin", "HOME": str(directory)},
            **servers.as_user(_RUN_AS),
        )
        wait_until(self._healthy, 30, interval=_POLL_S, what="etcd answering healthy")

    @property
    def hosts(self) -> str:
        return f"{HOST}:{self.port}"

    def _healthy(self) -> Answer:
        assert self.process.poll() is None, f"etcd exited\n{servers.evidence()}"
        answer = http_answer(f"http://{self.hosts}/health")
        return Answer(bool(answer) and '"health":"true"' in answer.seen, answer.seen)

    def close(self) -> None:
        servers.kill(self.process)


@dataclass(eq=False)
class PatroniNode:
    """One node: a Patroni process and the PostgreSQL server it manages."""

    name: str
    directory: Path
    environment: dict[str, str]
    # Chosen at its first start, not before: a port found free is taken by
    # the server at once, before another connection's ephemeral port can be
    # that one.
    port: int = 0
    rest_port: int = 0
    # Each byte another node's standby reads from this one is held this
    # long on its way (tests.support.faults.DelayedLink): a walsender
    # running behind, or a standby far away. The service connects directly.
    link_delay_s: float = 0.0
    process: subprocess.Popen[bytes] | None = None
    link: DelayedLink | None = None

    @property
    def data_dir(self) -> Path:
        return self.directory / self.name

    @property
    def log(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def config(self) -> Path:
        """The configuration it runs: the cluster's copy of CONFIG."""
        return self.directory / CONFIG_COPY

    @property
    def rest_url(self) -> str:
        return f"http://{HOST}:{self.rest_port}"

    def start(self) -> None:
        """Start Patroni, which starts (or first creates) its PostgreSQL, on the node's ports."""
        if not self.port:
            self.port, self.rest_port = free_port(), free_port()
        connect_address = (HOST, self.port)
        if self.link_delay_s:
            self.link = DelayedLink(connect_address, delay_s=self.link_delay_s)
            connect_address = self.link.address
        address = {
            "PATRONI_NAME": self.name,
            "PATRONI_RESTAPI_LISTEN": f"{HOST}:{self.rest_port}",
            "PATRONI_RESTAPI_CONNECT_ADDRESS": f"{HOST}:{self.rest_port}",
            "PATRONI_POSTGRESQL_LISTEN": f"{HOST}:{self.port}",
            # What the other nodes connect to: to copy it and stream from it.
            "PATRONI_POSTGRESQL_CONNECT_ADDRESS": "{}:{}".format(*connect_address),
            "PATRONI_POSTGRESQL_DATA_DIR": str(self.data_dir),
            "PATRONI_POSTGRESQL_PGPASS": str(self.directory / f"{self.name}.pgpass"),
            "PATRONI_POSTGRESQL_BIN_DIR": str(postgres_bindir()),
        }
        self.process = servers.start(
            f"patroni {self.name}",
            [_program("patroni"), str(self.config)],
            log=self.log,
            cwd=self.directory,
            env={**self.environment, **address},
            **servers.as_user(_RUN_AS),
        )

    def status(self) -> dict[str, Any]:
        """Patroni's view of this node (``GET /patroni``); empty if it does not answer."""
        try:
            answer: dict[str, Any] = requests.get(f"{self.rest_url}/patroni", timeout=2).json()
        except (requests.RequestException, ValueError):
            return {}
        return answer

    def is_primary(self) -> Answer:
        """Whether Patroni says this node is the primary (``GET /primary``, HAProxy's check).

        Patroni's answer says the node's state and role either way.
        """
        return http_answer(f"{self.rest_url}/primary")

    def is_synchronous_standby(self) -> Answer:
        return http_answer(f"{self.rest_url}/sync")

    def is_replica(self) -> Answer:
        return http_answer(f"{self.rest_url}/replica")

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """SIGKILL to Patroni, the postmaster and every backend at once: the machine died.

        Killed alone, a postmaster is started again in place by its Patroni,
        which still holds the leader key: a restart, not a failover. Its
        backends, killed too, answer no client after it (a backend whose
        postmaster died would finish the statement it is running).
        """
        assert self.process is not None
        postmaster = self.postmaster_pid()
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        servers.kill(self.process, wait=False)
        for pid in [postmaster, *map(int, children)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.link is not None:
            self.link.close()  # what it held had not left the machine
        self.process.wait()
        self.process = None

    def stop(self) -> None:
        """Stop Patroni cleanly: it shuts its PostgreSQL down first (and gives up the lead)."""
        if self.process is None:
            return
        servers.stop([self.process], within_s=60)
        self.process = None

    def close(self) -> None:
        """Kill whatever is left of the node."""
        if self.link is not None:
            self.link.close()
        if self.process is not None:
            servers.kill(self.process)
            self.process = None
        pidfile = self.data_dir / "postmaster.pid"
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(self.postmaster_pid(), signal.SIGKILL)


class PatroniCluster:
    """etcd and two Patroni nodes, started on creation: a leader and its standby.

    ``synchronous`` is the cluster's ``synchronous_mode`` before its standby
    starts (``deploy/patroni/patroni.yml`` sets it; ``False`` switches it
    off once the first node leads, as an operator would). ``link_delay_s``
    puts the nodes that far apart (:class:`PatroniNode`). ``close()`` kills
    everything and removes the directory, unless a test failed.
    """

    def __init__(self, *, synchronous: bool = True, link_delay_s: float = 0.0) -> None:
        self.directory = servers.workdir("patroni-")
        self.password = secrets.token_hex(16)
        self.nodes: list[PatroniNode] = []
        self.etcd: Etcd | None = None
        # The cluster's synchronous_mode, as deploy/patroni/patroni.yml or
        # set_synchronous left it.
        self.synchronous = True
        try:
            if os.geteuid() == 0:
                shutil.chown(self.directory, _RUN_AS)
            self.directory.chmod(0o700)
            shutil.copyfile(CONFIG, self.directory / CONFIG_COPY)
            self.etcd = Etcd(self.directory)
            environment = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(self.directory),
                "LANG": "C.UTF-8",
                "PATRONI_SCOPE": f"order-service-{self.directory.name}",
                "PATRONI_ETCD3_HOSTS": self.etcd.hosts,
                "PATRONI_SUPERUSER_PASSWORD": self.password,
                "PATRONI_REPLICATION_PASSWORD": self.password,
                "PATRONI_RESTAPI_PASSWORD": self.password,
            }
            self.nodes = [
                PatroniNode(f"pg{i}", self.directory, environment, link_delay_s=link_delay_s)
                for i in range(2)
            ]
            self.nodes[0].start()
            wait_until(
                lambda: self._running() and self.nodes[0].is_primary(),
                _START_WITHIN_S,
                interval=_POLL_S,
                what=f"the first leader ({self.nodes[0].name})",
            )
            if not synchronous:
                self.set_synchronous(False)
            self.nodes[1].start()
            self.wait_until_replicated(synchronous=synchronous)
        except BaseException:
            self.close(keep=True)
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close(keep=exc_type is not None)

    def url(self, dbname: str = "postgres", *, first: PatroniNode | None = None) -> str:
        """The multi-host URL of ``dbname``: every node, the primary chosen by libpq.

        libpq tries the hosts in their order (``first``, if given, leads) and
        keeps the first that takes writes.
        """
        nodes = sorted(self.nodes, key=lambda node: node is not first)
        hosts = ",".join(f"{HOST}:{node.port}" for node in nodes)
        password = quote(self.password)
        return f"postgres://postgres:{password}@{hosts}/{dbname}?target_session_attrs=read-write"

    def node_url(self, node: PatroniNode, dbname: str = "postgres") -> str:
        """The URL of ``dbname`` on ``node`` alone, whatever its role."""
        return f"postgres://postgres:{quote(self.password)}@{HOST}:{node.port}/{dbname}"

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def leader(self) -> PatroniNode:
        """The node Patroni says is the primary now."""
        leaders = [node for node in self.nodes if node.process is not None and node.is_primary()]
        assert len(leaders) == 1, f"{len(leaders)} primaries"
        return leaders[0]

    def standby(self) -> PatroniNode:
        """The one running node that is not the primary."""
        leader = self.leader()
        (standby,) = [n for n in self.nodes if n is not leader and n.process is not None]
        return standby

    def wait_for_leader(self, *, other_than: PatroniNode, within_s: float = 60) -> PatroniNode:
        """Until a node other than ``other_than`` is the primary; that node."""
        others = [node for node in self.nodes if node is not other_than]

        def one_leads() -> Answer:
            answers = [node.is_primary() for node in others]
            seen = "; ".join(f"{n.name}: {a}" for n, a in zip(others, answers, strict=True))
            return Answer(any(answers), seen)

        wait_until(
            one_leads, within_s, interval=_POLL_S, what=f"a primary other than {other_than.name}"
        )
        return next(node for node in others if node.is_primary())

    def wait_until_replicated(
        self, *, synchronous: bool, within_s: float = _START_WITHIN_S
    ) -> None:
        """Until one node leads and every other running one streams from it.

        With ``synchronous``, one of them is also its synchronous standby.
        """

        def streaming() -> Answer:
            self._running()
            running = [node for node in self.nodes if node.process is not None]
            seen, primaries, replicas, synchronous_ones = [], 0, 0, 0
            for node in running:
                if answer := node.is_primary():
                    primaries += 1
                elif answer := node.is_replica():
                    replicas += 1
                    if synchronous and (answer := node.is_synchronous_standby()):
                        synchronous_ones += 1
                seen.append(f"{node.name}: {answer}")
            holds = primaries == 1 and replicas == len(running) - 1
            return Answer(holds and (not synchronous or synchronous_ones > 0), "; ".join(seen))

        wait_until(
            streaming,
            within_s,
            interval=_POLL_S,
            what="a primary and its standbys streaming"
            + (", one of them synchronous" if synchronous else ""),
        )

    def _running(self) -> bool:
        """True; fails at once, with what the servers say, if etcd or a started node exited.

        Patroni exits when it cannot bootstrap its node (``Failed to bootstrap
        cluster``): a wait for it to lead would otherwise run out for nothing.
        """
        processes = {node.name: node.process for node in self.nodes if node.process is not None}
        if self.etcd is not None:
            processes["etcd"] = self.etcd.process
        exited = [name for name, process in processes.items() if process.poll() is not None]
        assert not exited, f"{', '.join(exited)} exited\n{servers.evidence()}"
        return True

    def _rest(self, method: str, path: str, body: dict[str, Any]) -> requests.Response:
        """An authenticated call to the leader's REST API (what ``patronictl`` sends)."""
        return requests.request(
            method,
            f"{self.leader().rest_url}{path}",
            data=json.dumps(body),
            auth=("patroni", self.password),
            timeout=60,
        )

    def switchover(self, *, to: PatroniNode) -> None:
        """A planned switchover to ``to``; returns once Patroni has done it.

        Asked once ``to`` streams (and, in synchronous mode, is the
        synchronous standby), as an operator checks ``patronictl list``
        first: Patroni refuses a candidate that may lack a commit.
        """
        self.wait_until_replicated(synchronous=self.synchronous)
        leader = self.leader()
        answer = self._rest("POST", "/switchover", {"leader": leader.name, "candidate": to.name})
        assert answer.status_code == 200, answer.text

    def set_synchronous(self, synchronous: bool, *, strict: bool = False) -> None:
        """``synchronous_mode`` (and ``_strict``) for the cluster, as ``patronictl edit-config``."""
        self.synchronous = synchronous
        answer = self._rest(
            "PATCH",
            "/config",
            {"synchronous_mode": synchronous, "synchronous_mode_strict": strict},
        )
        assert answer.status_code == 200, answer.text

    def close(self, *, keep: bool = False) -> None:
        """Kill every server; remove the directory, unless ``keep`` (a failure) says otherwise."""
        for node in self.nodes:
            node.close()
        if self.etcd is not None:
            self.etcd.close()
        servers.discard(self.directory, keep=keep)


@contextlib.contextmanager
def primary_proxy(cluster: PatroniCluster, dbname: str = "postgres") -> Iterator[str]:
    """HAProxy with deploy/haproxy/patroni.cfg in front of ``cluster``; the URL through it.

    The file runs as a deployment runs it: only the environment variables
    it documents differ, naming the nodes' ports here.
    """
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "PRIMARY_BIND": f"{HOST}:{port}"}
    for i, node in enumerate(cluster.nodes):
        env[f"PG{i}_ADDRESS"] = f"{HOST}:{node.port}"
        env[f"PG{i}_PATRONI_PORT"] = str(node.rest_port)
    # -W -db: master-worker mode in the foreground, as the haproxy image runs it.
    process = servers.start(
        "haproxy (to the primary)",
        [str(HAPROXY), "-W", "-db", "-f", str(HAPROXY_CONFIG)],
        log=cluster.directory / "haproxy.log",
        env=env,
    )
    try:
        yield f"postgres://postgres:{quote(cluster.password)}@{HOST}:{port}/{dbname}"
    finally:
        servers.stop([process])
