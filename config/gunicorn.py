"""gunicorn settings: ``gunicorn -c config/gunicorn.py config.wsgi:application``."""

import multiprocessing
import os
import shutil
import tempfile
from typing import Any

bind = os.environ.get("BIND", f"0.0.0.0:{os.environ.get('PORT', '8000')}")
# The usual (2 x cores) + 1 sync workers; requests spend most of their time
# waiting on the database, not on the CPU.
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 + 1))
threads = int(os.environ.get("WEB_THREADS", "1"))
# A request may wait IDEMPOTENCY_WAIT (2 s) for a duplicate and hold its key
# for at most IDEMPOTENCY_LOCK_TIMEOUT (30 s) before the database ends it;
# the worker timeout sits above both, so the database, not a killed worker,
# ends a stuck command.
timeout = int(os.environ.get("WEB_TIMEOUT", "45"))
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then so that a slow leak never becomes an outage.
max_requests = 2000
max_requests_jitter = 200
accesslog = None
errorlog = "-"

# Each worker process keeps its own metrics; prometheus_client's
# multiprocess mode adds them up at /metrics. The directory must exist and
# be empty before the workers import the app.
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="order-service-metrics-")


def on_exit(server: Any) -> None:
    shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
