"""The benches' service set-up: a database of their own, migrated and seeded, and a client.

Both benches (tests/bench/bench.py, tests/bench/keys.py) start the service
as deployed on a PostgreSQL database that they drop and create, so that
no figure depends on what an earlier run left, and on the Redis broker.
"""

import os
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import psycopg
from psycopg import sql

from tests.support.live import BIN, LiveService, base_env, manage, serve

SERVER_URL = os.environ.get("BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")
BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")


def database_url(database: str) -> str:
    return f"{SERVER_URL}/{database}"


def prepare(database: str) -> tuple[dict[str, str], str]:
    """Drop and create ``database``, migrate it, seed it and make an API client.

    Returns the environment to serve the service with and the client's bearer token.
    """
    drop(database)
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    env = base_env(
        DATABASE_URL=database_url(database),
        CELERY_BROKER_URL=BROKER_URL,
        # One key for every process of the run (gunicorn, Celery, manage.py),
        # and none left in var/, where the settings keep one when it is unset.
        SECRET_KEY="bench-" + uuid.uuid4().hex,
        # A log line per request would be measured with the request.
        LOG_LEVEL="WARNING",
    )
    manage("migrate", "--noinput", env=env)
    manage("seed_demo", env=env)
    # The token is create_api_client's last line of output.
    token = manage("create_api_client", "bench", "bench", env=env).strip().splitlines()[-1]
    return env, token


def drop(database: str) -> None:
    """Drop ``database``, connections and all."""
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


def purge_broker(env: Mapping[str, str]) -> None:
    """Drop the messages no worker took: the charges of the payments the rounds made."""
    subprocess.run(
        [str(BIN / "celery"), "-A", "config", "purge", "--force"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )


@contextmanager
def serving(
    env: Mapping[str, str], *, celery: bool = False, app: str = "config.wsgi:application"
) -> Iterator[LiveService]:
    """The service as deployed (gunicorn's workers: twice the cores, and one),
    and never a worker recycled.

    Deployed, it recycles none either, unless WEB_MAX_REQUESTS says so
    (config/gunicorn.py); then a new worker's second of start-up would land
    in whichever load runs then.
    """
    with serve(
        env,
        web_workers=2 * (os.cpu_count() or 1) + 1,
        celery=celery,
        gunicorn_args=["--max-requests", "0"],
        app=app,
    ) as live:
        yield live
