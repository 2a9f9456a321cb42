"""The Celery app: ``celery -A config worker`` and ``celery -A config beat``."""

import os
import time
from functools import partial
from typing import Any

import structlog
from celery import Celery, Task, signals
from celery.worker.consumer import Consumer
from kombu.connection import Connection

from observability import worker_metrics
from observability.exporting import export_if_configured
from observability.tracing import (
    TRACE_ID_HEADER,
    TRACEPARENT_HEADER,
    bind_trace_id,
    flush_spans,
    reset_trace_id,
    trace_id_of_message,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


class _Consumer(Consumer):
    """Celery's consumer, reconnecting to a lost broker every second.

    Celery waits 2, 4, 6… up to 30 seconds between attempts, so a worker
    could notice a broker back from a 15 s outage only 5 s later, and a
    longer outage costs up to 30 s more. An attempt is one TCP connect: once
    a second costs nothing, and the work committed meanwhile goes out as
    soon as the broker is back (operations.sweep runs on connect).
    """

    def ensure_connected(self, conn: Connection) -> Connection:
        conn.ensure_connection = partial(  # type: ignore[method-assign]
            conn.ensure_connection, interval_start=1, interval_step=0, interval_max=1
        )
        connected: Connection = super().ensure_connected(conn)
        return connected


app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.worker_consumer = f"{__name__}:_Consumer"
app.autodiscover_tasks()

if app.conf.broker_url.startswith("sqla+"):
    from kombu.transport import sqlalchemy
    from kombu.transport.sqlalchemy.models import metadata
    from sqlalchemy.exc import IntegrityError, OperationalError

    class _Channel(sqlalchemy.Channel):
        """kombu's channel, safe when several processes start on a fresh broker file.

        ``make run`` starts the worker beside gunicorn, and each creates the
        broker's tables and the task queue's row as it starts. kombu creates
        both check-then-insert, under a lock that serialises one process
        only: the loser of the race got "table already exists" or a unique
        violation, and a worker that lost died ("Unrecoverable error"),
        leaving payments processing. Each "already exists" means that another
        process has created one more table meanwhile, so the loser tries
        again, at most once per table, and then finds what the winners made.
        """

        def _open(self) -> Any:
            for _ in metadata.tables:
                try:
                    return super()._open()
                except OperationalError:
                    pass
            return super()._open()

        def _get_or_create(self, queue: str) -> Any:
            try:
                return super()._get_or_create(queue)
            except IntegrityError:
                self.session.rollback()
                return super()._get_or_create(queue)

    sqlalchemy.Transport.Channel = _Channel
    # The embedded broker polls its table, once a second by default, which
    # would add up to a second to every task. kombu passes transport options
    # to SQLAlchemy's create_engine (which rejects this one), so the polling
    # interval is set on the transport class itself.
    sqlalchemy.Transport.polling_interval = 0.1


# One log line per task, in the trace of the request that published it. Not
# django-structlog's Celery receivers, which write a line at each step of a
# task (received, started, succeeded or failed) and bind ids of their own:
# here the line carries the task's outcome and duration, and the trace id is
# the one the message brought (observability.tracing).

_task_logger = structlog.get_logger("order_service.task")


@signals.task_prerun.connect
def _bind_task_context(task_id: str, task: Task, **kwargs: Any) -> None:
    request = task.request
    trace_id = trace_id_of_message(
        getattr(request, TRACE_ID_HEADER, None), getattr(request, TRACEPARENT_HEADER, None)
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(trace_id=trace_id, task=task.name, task_id=task_id)
    # The task's own trace id too (observability.tracing.current_trace_id),
    # for what it calls: the provider, an operation it starts.
    request.trace_token = bind_trace_id(trace_id)
    request.started_at = time.perf_counter()


@signals.task_postrun.connect
def _log_task(task: Task, state: str | None = None, **kwargs: Any) -> None:
    started = getattr(task.request, "started_at", None)
    duration = round((time.perf_counter() - started) * 1000, 2) if started else None
    _task_logger.info("task", state=state, duration_ms=duration)
    structlog.contextvars.clear_contextvars()
    if (token := getattr(task.request, "trace_token", None)) is not None:
        reset_trace_id(token)


# Spans, when an OTLP endpoint is set (observability/otel.py), set up in the
# process that runs the tasks: the exporter's thread and connections would
# not survive a fork. A prefork pool's children set it up as they start;
# any other pool (solo, threads) runs the tasks in the worker itself.


def _forks(worker: Any) -> bool:
    pool = worker.pool_cls
    # A name (-P prefork) or the class itself, as Celery's own Django fixup reads it.
    name = pool if isinstance(pool, str) else pool.__module__
    return "prefork" in name or name == "processes"


@signals.worker_init.connect
def _export_spans_unforked(sender: Any, **kwargs: Any) -> None:
    if not _forks(sender):
        export_if_configured(django=False)


@signals.worker_process_init.connect
def _export_spans_in_child(**kwargs: Any) -> None:
    export_if_configured(django=False)


@signals.worker_process_shutdown.connect
def _flush_spans(**kwargs: Any) -> None:
    # A pool's child ends without running atexit, where the SDK would flush.
    flush_spans()


# A worker's own metrics (observability/worker_metrics.py), in the real
# worker only (``celery worker`` sends celeryd_init; a test's worker does
# not). celeryd_init comes before Django loads the apps, whose modules
# define the metrics; worker_init after, and before the pool forks.

_metrics_directory: str | None = None


@signals.celeryd_init.connect
def _prepare_worker_metrics(**kwargs: Any) -> None:
    global _metrics_directory
    from django.conf import settings

    if settings.WORKER_METRICS_PORT:
        _metrics_directory = worker_metrics.prepare_directory()


@signals.worker_init.connect
def _serve_worker_metrics(**kwargs: Any) -> None:
    from django.conf import settings

    if _metrics_directory is not None:
        worker_metrics.serve(
            settings.WORKER_METRICS_ADDR, settings.WORKER_METRICS_PORT, _metrics_directory
        )


@signals.worker_shutdown.connect
def _remove_worker_metrics(**kwargs: Any) -> None:
    if _metrics_directory is not None:
        worker_metrics.remove_directory(_metrics_directory)


# Payments and webhook deliveries have queues of their own so that they never
# share a worker's slots (docs/DEPLOYING.md, "Workers"). A worker started
# without -Q consumes both, as development wants; in production that is the
# mistake that lets a tenant's slow receivers delay everyone's payments, so
# the worker says so as it starts.


@signals.celeryd_after_setup.connect
def _warn_of_shared_slots(sender: str, instance: Any, **kwargs: Any) -> None:
    consumed = sorted(instance.app.amqp.queues.consume_from)
    if len(consumed) > 1:
        structlog.get_logger(__name__).warning(
            "this worker consumes several queues, so slow webhook receivers can delay "
            "payments here; in production run one worker per queue "
            "(-Q celery, -Q webhooks: docs/DEPLOYING.md, Workers)",
            queues=consumed,
        )


# A tenant has at most WEBHOOK_TENANT_CONCURRENCY delivery attempts in flight
# (events.tenant_slots): a deliveries worker with no more slots than that can
# be filled by one tenant's slow receivers, and another tenant's delivery
# waits for them. The worker says so as it starts.


def _slots(instance: Any) -> int:
    """How many tasks the worker runs at once: one for the solo pool, else its concurrency."""
    pool = instance.pool_cls
    name = pool if isinstance(pool, str) else pool.__module__
    return 1 if "solo" in name else int(instance.concurrency)


@signals.celeryd_after_setup.connect
def _warn_of_too_few_delivery_slots(sender: str, instance: Any, **kwargs: Any) -> None:
    from django.conf import settings

    if settings.WEBHOOK_QUEUE not in instance.app.amqp.queues.consume_from:
        return
    slots, bound = _slots(instance), settings.WEBHOOK_TENANT_CONCURRENCY
    if slots <= bound:
        structlog.get_logger(__name__).warning(
            "this worker delivers webhooks with no more slots than one tenant may fill "
            "(WEBHOOK_TENANT_CONCURRENCY), so one tenant's slow receivers can delay "
            "everyone's deliveries; give it more (--pool=threads --concurrency=N: "
            "docs/DEPLOYING.md, Workers)",
            slots=slots,
            tenant_concurrency=bound,
        )
