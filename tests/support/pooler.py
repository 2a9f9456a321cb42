"""PgBouncer in transaction pooling mode in front of a test's database: the real program.

``pgbouncer(database_url)`` writes a configuration in a temporary directory,
starts ``pgbouncer`` on it (as the ``postgres`` user when the tests run as
root: PgBouncer refuses to run as root), returns once it accepts
connections and hands out a ``PgBouncer``: the database's URL through the
pooler and its admin console. On exit it stops PgBouncer and removes the
directory.

The settings, and why each is what it is:

- ``pool_mode = transaction``: the mode under test. A server connection is
  a client's for one transaction only and then serves another client, so
  whatever a session keeps between transactions (``SET``, prepared
  statements, ``WITH HOLD`` cursors, session advisory locks, ``LISTEN``)
  is lost or leaks into another client's transactions.
- ``default_pool_size`` (``pool_size``, 4 by default): fewer server
  connections than the service has clients (every gunicorn thread keeps its
  own connection, CONN_MAX_AGE, and so do the Celery worker's threads), so
  that clients really take turns on few servers.
- ``reserve_pool_size = 0``: no extra servers when clients queue, so the
  pool size is a hard cap that a test can hold PgBouncer to.
- ``server_round_robin = 1``: consecutive transactions of one client go to
  different servers where they can, instead of PgBouncer's default (the
  server used last, LIFO), under which a reliance on session state would
  mostly pass by luck.
- ``max_client_conn = 200``: above the clients a test's service opens
  (workers x threads, the Celery worker, the test's console connections);
  PgBouncer refuses clients beyond it.
- ``auth_type = trust`` and an ``auth_file`` naming the user: the local
  PostgreSQL trusts 127.0.0.1, and PgBouncer's ``trust`` still wants the
  user listed. PgBouncer logs in to PostgreSQL as the client's user.
- ``ignore_startup_parameters = extra_float_digits,options``: PgBouncer
  refuses a client whose startup packet carries a parameter it does not
  know; some drivers send ``extra_float_digits`` and libpq sends
  ``options`` when ``PGOPTIONS`` is set. (Per-connection ``options`` are
  lost under transaction pooling anyway.)
- ``admin_users``: the user may open the admin console (database
  ``pgbouncer``) for ``SHOW POOLS``, ``SHOW SERVERS``, ``SHOW CLIENTS``.
- ``listen_addr = 127.0.0.1`` on a free port and ``unix_socket_dir`` empty:
  TCP on the loopback only, and no socket file in /tmp to clash with a
  PostgreSQL or another PgBouncer on the same port number.
"""

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg

from tests.support import servers
from tests.support.live import free_port
from tests.support.waits import wait_until

HOST = "127.0.0.1"
# PgBouncer refuses to run as root; this user owns PostgreSQL on Debian.
_RUN_AS = "postgres"
_START_WITHIN_S = 10.0


@dataclass(frozen=True)
class Console:
    """A connection to PgBouncer's admin console, seen from one pooled database."""

    connection: "psycopg.Connection[Any]"
    database: str

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW what`` (``POOLS``, ``SERVERS``, ``CLIENTS``, ``STATS``…), as rows."""
        with self.connection.cursor() as cursor:
            cursor.execute(f"SHOW {what}")
            names = [column.name for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def servers(self) -> list[dict[str, Any]]:
        """The server connections PgBouncer holds to the database now."""
        return [row for row in self.show("SERVERS") if row["database"] == self.database]

    def clients(self) -> list[dict[str, Any]]:
        """The client connections to the database through PgBouncer now."""
        return [row for row in self.show("CLIENTS") if row["database"] == self.database]


@dataclass(frozen=True)
class PgBouncer:
    """A running PgBouncer: the database through it, and its admin console."""

    url: str
    """The database's URL through the pooler (same user and database name)."""
    admin_url: str
    """The admin console (database ``pgbouncer``)."""
    database: str
    pool_size: int

    @contextmanager
    def console(self) -> Iterator[Console]:
        """A connection to the admin console, closed on exit."""
        # The console speaks the simple query protocol only, which psycopg's
        # client-side binding cursor uses for a query without parameters;
        # and it has no transactions.
        with psycopg.connect(
            self.admin_url, autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as connection:
            yield Console(connection, self.database)


@contextmanager
def pgbouncer(
    database_url: str, *, pool_size: int = 4, max_client_conn: int = 200
) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode in front of ``database_url``, until exit.

    ``database_url`` is ``postgres://user@host:port/name`` on a server that
    trusts ``user`` from PgBouncer's address.
    """
    upstream = urlsplit(database_url)
    user, database = upstream.username or _RUN_AS, upstream.path.lstrip("/")
    port = free_port()
    upstream_database = (
        f"{database} = host={upstream.hostname} port={upstream.port or 5432} dbname={database}\n"
    )
    with servers.workspace("pgbouncer-") as directory:
        if os.geteuid() == 0:
            shutil.chown(directory, _RUN_AS)  # pgbouncer reads its files as that user
        config = directory / "pgbouncer.ini"
        log = directory / "pgbouncer.log"
        (directory / "userlist.txt").write_text(f'"{user}" ""\n')
        config.write_text(
            "[databases]\n"
            f"{upstream_database}"
            "\n[pgbouncer]\n"
            f"listen_addr = {HOST}\n"
            f"listen_port = {port}\n"
            "unix_socket_dir =\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "reserve_pool_size = 0\n"
            "server_round_robin = 1\n"
            f"max_client_conn = {max_client_conn}\n"
            "auth_type = trust\n"
            f"auth_file = {directory / 'userlist.txt'}\n"
            f"admin_users = {user}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        pooler = PgBouncer(
            url=f"postgres://{user}@{HOST}:{port}/{database}",
            admin_url=f"postgres://{user}@{HOST}:{port}/pgbouncer",
            database=database,
            pool_size=pool_size,
        )
        # In the foreground: SIGTERM (servers.stop) is PgBouncer's immediate
        # shutdown, and its log goes to the file given here.
        process = servers.start(
            "pgbouncer",
            [_program("pgbouncer"), str(config)],
            log=log,
            cwd=directory,
            **servers.as_user(_RUN_AS),
        )
        try:
            _wait_until_serving(pooler, process)
            yield pooler
        finally:
            servers.stop([process])


def _wait_until_serving(pooler: PgBouncer, process: subprocess.Popen[bytes]) -> None:
    """Until a query through PgBouncer reaches the database; fails at once if it exits."""

    def serving() -> bool:
        assert process.poll() is None, f"pgbouncer exited\n{servers.evidence()}"
        with psycopg.connect(pooler.url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True

    # PgBouncer announces readiness to systemd alone: its port is polled.
    wait_until(
        serving,
        _START_WITHIN_S,
        interval=0.02,
        what=f"a query through PgBouncer ({pooler.url})",
        ignoring=(psycopg.OperationalError,),
    )


def _program(name: str) -> str:
    """The path of ``name``: on PATH, or in /usr/sbin, where Debian installs pgbouncer."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
    if path is None:
        raise FileNotFoundError(f"{name} is not installed")
    return path
