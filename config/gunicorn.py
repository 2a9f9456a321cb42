"""gunicorn settings: ``gunicorn -c config/gunicorn.py config.wsgi:application``.

The plain ``gunicorn config.wsgi:application`` uses them too when it starts
in the project's directory: gunicorn reads ./gunicorn.conf.py by itself,
and that file loads this one. Options on the command line win over both
(``-w 4``, ``-b``).
"""

import multiprocessing
import os
import shutil
import tempfile
from typing import Any

bind = os.environ.get("BIND", f"0.0.0.0:{os.environ.get('PORT', '8000')}")
# The usual (2 x cores) + 1 worker processes; requests spend most of their
# time waiting on the database, not on the CPU.
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 + 1))
# Threaded workers (gthread): a client that connects and sends nothing holds
# a thread for at most 5 s and then waits in the worker's poller, holding no
# thread; but one that sends part of its headers or body holds a thread for
# as long as it keeps the connection open. With a sync worker each such
# client held a whole process. 8 threads per worker let a handful of them
# sit in one worker (the kernel does not spread connections evenly over the
# workers) and leave it threads to serve everyone else. More than `threads`
# such clients in one worker starve it: nginx in front (docker-compose.yml,
# deploy/nginx/) is the real defence, since it forwards only whole requests.
# Each thread that served a request keeps its own database connection
# (CONN_MAX_AGE): workers x threads connections at most, to be kept under
# PostgreSQL's max_connections.
threads = int(os.environ.get("WEB_THREADS", "8"))

# gthread, with gunicorn's own error answers (bad request line, 414, 431, ...)
# in the service's problem+json format.
worker_class = "api.gunicorn_worker.ProblemJsonThreadWorker"
# A request may wait IDEMPOTENCY_WAIT for a duplicate; a command stuck in
# one statement, or idle between two, for IDEMPOTENCY_LOCK_TIMEOUT is ended
# by the database (docs/SPECIFICATION.md §3 rule 9). A threaded worker's
# main loop keeps beating while its threads serve, so this timeout does not
# end a slow request: it restarts a worker whose main loop is stuck. nginx
# waits longer than this for an answer (proxy_read_timeout).
timeout = int(os.environ.get("WEB_TIMEOUT", "45"))
graceful_timeout = 30
keepalive = 5
# No recycling: measured, a worker's memory does not grow with the requests
# it serves. `make soak-http SOAK_HTTP_MAX_REQUESTS=0` (tests/bench/soak_http.py)
# sends mixed requests to two workers never restarted: each reaches its size
# within its first few hundred requests (modules imported on first use, a
# database connection per thread) and stays there, where recycled workers
# are too. A restart costs the new worker the CPU of loading Django again,
# and the master a fold of the old one's metrics (observability/
# metrics_archive.py): with nothing to cure, recycling was a cost alone
# (the figures: docs/SCALING.md, "Worker restarts and /metrics").
# WEB_MAX_REQUESTS=N brings it back, should a leak appear (say which, and
# measure it with that soak); gunicorn adds up to 10 % at random, so that
# the workers do not all restart together.
max_requests = int(os.environ.get("WEB_MAX_REQUESTS", "0"))
max_requests_jitter = max_requests // 10
accesslog = None
errorlog = "-"
# No control socket (gunicorn 25.1+, for gunicornc). Its default path is one
# per user ($HOME/.gunicorn/gunicorn.ctl), so several instances on one host,
# as the multi-node set-up runs them, would take it from each other; and it
# puts a thread with fork hooks into the master, which needs neither:
# signals do what it offers (TERM, HUP, TTIN, TTOU).
control_socket_disable = True

# Each worker process keeps its own metrics; prometheus_client's
# multiprocess mode adds them up at /metrics. The directory must exist and
# be empty before the workers import the app. Set here, in the master, so
# that every worker inherits it; one directory per server, removed on exit.
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="order-service-metrics-")


def on_exit(server: Any) -> None:
    shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)


def child_exit(server: Any, worker: Any) -> None:
    # The master calls this for every worker it reaps, whatever ended it
    # (recycled, killed, timed out), before it forks the replacement. The
    # module loads no Django (tests/observability holds it to that); it is
    # imported here so that reading this file needs nothing of the project.
    from observability.metrics_archive import fold_dead_worker

    fold_dead_worker(worker.pid)
