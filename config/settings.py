"""The one settings module, configured by environment variables.

Unset variables fall back to the embedded default: a SQLite file and a
SQLite-backed Celery broker under ``var/``, so the service runs with no
server installed. Production sets ``DATABASE_URL`` (PostgreSQL) and
``CELERY_BROKER_URL`` (Redis or RabbitMQ).
"""

import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured
from kombu.entity import Queue

from observability.logging import configure_structlog

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(environ.Env().str("VAR_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()

DEBUG = env.bool("DEBUG", default=False)


def _local_secret_key() -> str:
    """A random key kept in ``var/``, for when ``SECRET_KEY`` is unset.

    Every process on this machine (web workers, Celery) must sign with the
    same key, because idempotency field digests are keyed by it, so the key
    is written once and read back rather than generated per process.
    Deployments on more than one machine set ``SECRET_KEY``.
    """
    path = VAR_DIR / "secret_key"
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # Written aside and linked into place: a process starting at the same
        # moment reads either no file or the whole key, never half of it.
        draft = VAR_DIR / f".secret_key.{os.getpid()}"
        draft.write_text(secrets.token_urlsafe(50))
        draft.chmod(0o600)
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY", default="") or _local_secret_key()

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Failed logins to the admin, counted in the database (so across every
    # worker process) to lock out password guessing.
    "axes",
    # Ours, from the bottom layer up: the HTTP API layer and the generic
    # apps, which know no order or payment, then the payment provider
    # simulator and the domain.
    "api",
    "accounts",
    "idempotency",
    "operations",
    "provider",
    "events",
    "orders",
]

MIDDLEWARE = [
    # First, so that every response, errors included, carries X-Request-ID
    # and is logged and measured.
    "api.middleware.RequestContextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "api.middleware.RequestBodyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it answers a locked-out login attempt.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Before the apps' templates: api/templates overrides drf-spectacular's
        # Redoc page, which would load fonts from Google.
        "DIRS": [BASE_DIR / "api" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------


def _database(url: str) -> dict[str, Any]:
    """The Django database at ``url``, with how we connect to it.

    A PostgreSQL URL may name several hosts, as libpq does
    (``postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write``):
    each new connection then goes to whichever is the primary, so that after
    a failover every process finds the new one by itself
    (docs/DEPLOYING.md#a-replicated-postgresql).
    """
    database: dict[str, Any] = env.db_url_config(url)
    if database["ENGINE"] == "django.db.backends.sqlite3":
        # SQLite serialises writers. BEGIN IMMEDIATE takes the write lock at
        # the start of every transaction instead of upgrading a read lock
        # midway (which fails at once with "database is locked"); WAL lets
        # readers run beside the one writer; the busy timeout makes writers
        # queue.
        database["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;"
            ),
        }
        return database
    # Persistent connections save a connect per request under gunicorn; the
    # health check at each request's first query replaces one the database
    # closed (a restart, a failover), so the same processes serve again once
    # it is back.
    database.setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    database.setdefault("CONN_HEALTH_CHECKS", True)
    # A database that does not answer at all (a host down, a dropped route)
    # must fail the request in seconds, with 503, not hold a worker until
    # gunicorn's timeout kills it. libpq applies it to each host of a
    # multi-host URL in turn.
    database.setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT", default=3)
    )
    return database


DATABASES = {
    "default": _database(
        env.str("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'order-service.sqlite3'}")
    ),
}
# The payment provider simulator's records, in a database of their own when
# PROVIDER_DATABASE_URL names one: where a remote provider's records are, out
# of reach of whatever happens to ours (a failover, a restore). Unset, they
# live in the service's database. The alias is the provider app's
# (provider/routers.py routes the app to it).
if PROVIDER_DATABASE_URL := env.str("PROVIDER_DATABASE_URL", default=""):
    DATABASES["provider"] = _database(PROVIDER_DATABASE_URL)
DATABASE_ROUTERS = ["provider.routers.ProviderRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Idempotency ----------------------------------------------------------

# How long a completed key is kept and replayed (seconds). A day covers the
# retry window of every HTTP client and queue we know of; after it the key
# is forgotten and the same key is a new command.
IDEMPOTENCY_KEY_TTL = env.int("IDEMPOTENCY_KEY_TTL", default=86400)
# How long a duplicate waits for the request that holds its key (seconds)
# before it is told 409 IdempotencyKeyInProgress. Commands take milliseconds;
# two seconds absorbs a slow commit without tying up a worker for long.
IDEMPOTENCY_WAIT = env.float("IDEMPOTENCY_WAIT", default=2.0)
# How long one statement of a command's transaction, or one pause between
# two, may last (seconds). The database ends a transaction stuck in a
# statement or idle for longer, which releases the key of a hung process; a
# dead process releases it at once. It bounds hangs, not the transaction's
# total time (docs/SPECIFICATION.md §3 rule 9).
IDEMPOTENCY_LOCK_TIMEOUT = env.float("IDEMPOTENCY_LOCK_TIMEOUT", default=30.0)
# Seconds the purge of expired keys waits between two batches of deletes:
# with 50 ms a purge of a million keys leaves the database to commands for
# more than half of its time, and their p99 within 2x of its usual value
# (why: idempotency/retention.py; measured: docs/SCALING.md, "The purge").
IDEMPOTENCY_PURGE_PAUSE = env.float("IDEMPOTENCY_PURGE_PAUSE", default=0.05)
# The most one principal's keys, digests and answers may hold within the
# retention window (bytes); past it a new key is refused 429 KeyQuotaExceeded.
# Keys are the one storage a client grows at will, and throttling is off by
# default. 512 MiB is some 380,000 keys of one-line orders (1.4 KB each as
# counted), 4.4 commands a second all day long: a principal that sends more
# needs a larger value (idempotency/quota.py).
IDEMPOTENCY_STORAGE_PER_PRINCIPAL = env.int(
    "IDEMPOTENCY_STORAGE_PER_PRINCIPAL", default=512 * 1024 * 1024
)

# --- Payments -------------------------------------------------------------

# The payment provider: a class implementing provider.gateway.PaymentGateway.
PAYMENT_GATEWAY = env.str("PAYMENT_GATEWAY", default="provider.simulator.SimulatedProvider")
# Simulated provider latency per call (seconds).
PAYMENT_PROVIDER_LATENCY = env.float("PAYMENT_PROVIDER_LATENCY", default=0.05)
# First retry delay after a provider timeout or 5xx (seconds); it doubles
# with each attempt, up to a minute (operations.registry.RetryPolicy).
PAYMENT_RETRY_BACKOFF = env.float("PAYMENT_RETRY_BACKOFF", default=1.0)
# Attempts of one operation before it ends, whatever failed them: a
# provider's refusal or timeout, a worker lost during the attempt, a bug.
# Ten attempts with the payment backoff span about four minutes (1 + 2 + 4 +
# … seconds, a minute at most between two), which rides out a provider's
# brief outage and a deploy, yet tells a customer within minutes that a
# payment failed, so that the order can be paid again. Past the budget a
# payment is failed only after the provider has said it holds no charge
# for it (orders.handlers.settle_charge).
OPERATION_MAX_ATTEMPTS = env.int("OPERATION_MAX_ATTEMPTS", default=10)
# How long a message may go untaken before it may be presumed lost (seconds).
# A message is published again only when it is lost: its publish failed, the
# worker that took it died, or the queue has moved past it (a worker has
# received a message published this much later than it) or is empty while
# it is still untaken this long after its publish
# (operations.sweep.sweep_lost_operations). A message that merely waits
# behind others in a backlog is never copied, however long it waits. Ten
# seconds is far above the time a message takes to reach an idle worker and
# above any difference between the clocks of the machines that publish
# (NTP keeps them within milliseconds); a message lost on an idle queue is
# copied once it is this old and the queue was empty at two sweeps in a row
# (docs/WAITS.md).
OPERATION_STALE_AFTER = env.float("OPERATION_STALE_AFTER", default=10.0)
# How long a worker holds an operation it works on (seconds). It renews the
# lease every third of it while it works, so this bounds how long a dead
# worker's operation waits, not how long an attempt may take.
OPERATION_LEASE = env.float("OPERATION_LEASE", default=10.0)
# How often every worker runs the sweep (seconds), besides once each time it
# connects to the broker. A sweep is a read of each queue's length and one
# indexed query when nothing is lost.
OPERATION_SWEEP_INTERVAL = env.float("OPERATION_SWEEP_INTERVAL", default=2.0)
# How long an ended (succeeded or failed) operation is kept (seconds),
# counted from its end; then beat's purge deletes it and its id is 404
# (operations/retention.py). 30 days, as long as the feed's events. Never
# less than IDEMPOTENCY_KEY_TTL: a replay of a 202 reports its operation's
# status, and an operation ends after its key was claimed, so with this at
# least the key's TTL the key always goes first.
OPERATION_RETENTION = env.int("OPERATION_RETENTION", default=30 * 86400)
if OPERATION_RETENTION < IDEMPOTENCY_KEY_TTL:
    raise ImproperlyConfigured(
        f"OPERATION_RETENTION ({OPERATION_RETENTION} s) is below IDEMPOTENCY_KEY_TTL"
        f" ({IDEMPOTENCY_KEY_TTL} s): a replay of a 202 reports its operation's status,"
        " so an ended operation must be kept at least as long as the key that answers"
        " with it. Raise OPERATION_RETENTION or lower IDEMPOTENCY_KEY_TTL."
    )

# --- Events and webhooks ----------------------------------------------------

# How long events are kept in the feed (seconds): 30 days, the contract's
# least, so that a consumer down for a month catches up with `after=`.
EVENT_RETENTION = env.int("EVENT_RETENTION", default=30 * 86400)
# How long one delivery attempt may take in all (seconds), from connecting to
# the answer's status line and headers (events/outbound.py); a 2xx within it
# delivers the event.
WEBHOOK_TIMEOUT = env.float("WEBHOOK_TIMEOUT", default=10.0)
# First retry delay of an undelivered event (seconds), doubling with each
# attempt. With 8 attempts the last comes some two hours after the first:
# long enough to ride out a receiver's deploy or short outage.
WEBHOOK_RETRY_BACKOFF = env.float("WEBHOOK_RETRY_BACKOFF", default=60.0)
# Attempts of one delivery before it ends failed (the event stays in the feed).
WEBHOOK_MAX_ATTEMPTS = env.int("WEBHOOK_MAX_ATTEMPTS", default=8)
# Deliver to loopback, private, link-local and multicast addresses too
# (events.addresses). Off: a client's URL must not reach our own network,
# and an endpoint naming one is refused 400 with this setting's name. That
# refusal is final under its key (docs/SPECIFICATION.md §3 rule 5): after a
# restart with the setting on, the same key replays it; a new key is needed.
WEBHOOK_ALLOW_PRIVATE_URLS = env.bool("WEBHOOK_ALLOW_PRIVATE_URLS", default=False)
# The most enabled endpoints one tenant may have: every event costs a
# delivery per endpoint, so this bounds the work a tenant's command causes.
WEBHOOK_ENDPOINTS_PER_TENANT = env.int("WEBHOOK_ENDPOINTS_PER_TENANT", default=16)
# The most delivery attempts of one tenant in flight at once, across all
# workers (events.tenant_slots); an attempt over it waits, uncounted, for
# one of the tenant's to end. Without it a tenant's slow receivers, one
# attempt each, could hold every delivery slot. Four: some 80 deliveries a
# second for a tenant whose receivers answer in 50 ms, and a deliveries
# worker of 8 slots keeps 4 for everyone else. The deliveries workers must
# have more slots than this (docs/DEPLOYING.md, "Workers").
WEBHOOK_TENANT_CONCURRENCY = env.int("WEBHOOK_TENANT_CONCURRENCY", default=4)
if WEBHOOK_TENANT_CONCURRENCY < 1:
    raise ImproperlyConfigured(
        f"WEBHOOK_TENANT_CONCURRENCY ({WEBHOOK_TENANT_CONCURRENCY}) must be at least 1:"
        " with none, no tenant's events would ever be delivered."
    )

# --- Celery ---------------------------------------------------------------

CELERY_BROKER_URL = env.str(
    "CELERY_BROKER_URL", default=f"sqla+sqlite:///{VAR_DIR / 'celery-broker.sqlite3'}"
)
# Two queues, so that two kinds of work never share worker slots (docs/DEPLOYING.md,
# "Workers"): payments and refunds on Celery's default queue, and webhook
# deliveries, whose attempts last as long as a client's receiver makes them
# (up to WEBHOOK_TIMEOUT each), on a queue of their own. A worker started
# without -Q consumes both, as one needs for development; a deployment runs
# one worker with -Q celery and another with -Q webhooks.
CELERY_TASK_DEFAULT_QUEUE = "celery"
WEBHOOK_QUEUE = "webhooks"
CELERY_TASK_QUEUES = [
    Queue(name, routing_key=name) for name in (CELERY_TASK_DEFAULT_QUEUE, WEBHOOK_QUEUE)
]
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Results live in our own tables (operations), never in a result backend.
CELERY_TASK_IGNORE_RESULT = True
# A task is acknowledged after it ran, so a worker that dies mid-task has
# its message redelivered; the tasks are idempotent, so that is safe.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker that loses the broker tries again every second for as long as it
# takes (config/celery.py). Celery's default gives up after 100 attempts,
# and the worker exits ("Unrecoverable error"): a broker down for two
# minutes left no worker to consume once it was back.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Redis redelivers an unacknowledged message after this many seconds.
        # It must exceed the longest task plus its retry countdown (retries
        # wait in the worker, unacknowledged, for at most a minute), or a
        # slow task would be delivered twice; twice is harmless, only wasted.
        "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=300),
        # A broker that stops answering must not hold a command that
        # publishes after its commit: the publish fails in seconds and the
        # sweep sends the task later. Above the worker's 1 s BRPOP.
        "socket_connect_timeout": 2,
        "socket_timeout": 3,
    }
# Port of a worker's own /metrics: provider calls and operations ending,
# which only workers see (observability/worker_metrics.py); 0 serves none.
WORKER_METRICS_PORT = env.int("WORKER_METRICS_PORT", default=9540)
# The address it binds: all interfaces, since Prometheus scrapes each worker
# from another host or container (deploy/prometheus/prometheus.yml);
# 127.0.0.1 where nothing outside the machine should see it, as `make run`.
WORKER_METRICS_ADDR = env.str("WORKER_METRICS_ADDR", default="0.0.0.0")  # noqa: S104
# Our JSON logging (below) applies to the worker too.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "purge-expired-idempotency-keys": {
        "task": "idempotency.tasks.purge_expired_keys",
        # IDEMPOTENCY_PURGE_INTERVAL (seconds): hourly keeps the table within
        # an hour of its retention.
        "schedule": env.float("IDEMPOTENCY_PURGE_INTERVAL", default=3600.0),
    },
    "purge-expired-events": {
        "task": "events.tasks.purge_expired_events",
        # Hourly: the feed holds at most an hour past EVENT_RETENTION.
        "schedule": 3600.0,
    },
    "purge-ended-operations": {
        "task": "operations.tasks.purge_ended_operations",
        # Hourly: an ended operation is kept at most an hour past
        # OPERATION_RETENTION, and a run deletes about an hour's operations.
        "schedule": 3600.0,
    },
}

# --- REST framework ---------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.StrictJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    # API_THROTTLE_RATE per principal, counted in the database so that every
    # worker process shares it (api.throttling); unset, no throttle runs.
    "DEFAULT_THROTTLE_CLASSES": (
        ["api.throttling.PrincipalRateThrottle"] if env.str("API_THROTTLE_RATE", "") else []
    ),
    "DEFAULT_THROTTLE_RATES": {"principal": env.str("API_THROTTLE_RATE", default="") or None},
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # Field names on the wire are camelCase, errors that belong to no one
    # field too.
    "NON_FIELD_ERRORS_KEY": "nonFieldErrors",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Order service",
    "DESCRIPTION": """\
Idempotent REST commands for orders and payments.

## Authentication
Every request to `/v1/` (this schema aside) carries `Authorization: Bearer <token>`.
A principal belongs to one tenant and sees only that tenant's orders, payments and
operations: another tenant's resource is answered `404`, like a missing one.

## Asynchronous commands
Payments and refunds answer `202` with `Location: /v1/operations/op_…` and
`Retry-After`; poll the operation until its `status` is `succeeded` or `failed`, waiting
what each answer's `Retry-After` says (it grows as the operation ages, up to 30 s).

## Errors
Every error is `application/problem+json` with `type`, `title`, `status`, `error` (a
stable PascalCase code), `message`, `traceId` and optional `details`. The `traceId` is
the response's `X-Request-ID`, or the trace id of a valid W3C `traceparent` the request
carried.

## Lists
Cursor-paginated, newest first (the event feed oldest first): `{"results": […],
"next": url|null, "previous": url|null, "nextCursor": str|null, "previousCursor": str|null}`.
Follow `next`, or pass `nextCursor` back as `cursor`, on the list (path, filters) that
issued it; `pageSize` is an integer from 1 to 200 (default 50).
""",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its pages are public (docs/SPECIFICATION.md §2); a stale or wrong
    # token must not break them, so they authenticate nobody.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # Served from our own static files: the docs work with no internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # validatorUrl would send the schema's URL to swagger.io.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "TAGS": [
        {"name": "orders", "description": "Place, read and cancel orders."},
        {"name": "payments", "description": "Pay orders; charged asynchronously."},
        {"name": "operations", "description": "Poll asynchronous work."},
        {"name": "events", "description": "What happened, once each: the event feed."},
        {
            "name": "webhooks",
            "description": "Events pushed to your endpoints, signed (Standard Webhooks).",
        },
        {
            "name": "idempotency",
            "description": "What became of an Idempotency-Key: look a command up by its key.",
        },
    ],
    # Several models have a `status`; each enum gets its model's name.
    "ENUM_NAME_OVERRIDES": {
        "OrderStatusEnum": "orders.models.Order.Status",
        "PaymentStatusEnum": "orders.models.Payment.Status",
        "OperationStatusEnum": "operations.models.Operation.Status",
        "OperationKindEnum": "operations.registry.kinds",
        "DeliveryStatusEnum": "events.models.Delivery.Status",
        "WebhookEndpointStatusEnum": "events.models.WebhookEndpoint.Status",
        "CommandStatusEnum": ["succeeded"],
    },
    # Ids in paths (api.converters.ResourceIdConverter).
    "PATH_CONVERTER_OVERRIDES": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9._~-]{1,64}$"},
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.openapi.hooks.camel_case_path_parameters",
        "api.openapi.hooks.require_every_output_field",
        "idempotency.schema.describe_policy",
        "orders.schema.add_links",
        "events.schema.add_webhook_headers",
    ],
}

# --- The admin ---------------------------------------------------------------

# /admin/ serves the Django admin (read-only records, API clients). It is a
# login page on the API's port: a deployment that does not use it switches
# it off (docker-compose.yml does, unless ADMIN_ENABLED=true is asked for).
ADMIN_ENABLED = env.bool("ADMIN_ENABLED", default=True)
AUTHENTICATION_BACKENDS = [
    # Refuses a login from an address with too many recent failures.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Five wrong passwords from one address lock it out of the admin's login for
# fifteen minutes (answered 429): guessing a password becomes impractical,
# and a locked-out administrator waits a quarter of an hour at worst.
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_RESET_ON_SUCCESS = True
# The client's address, from X-Forwarded-For only BEHIND_PROXY.
AXES_CLIENT_IP_CALLABLE = "api.middleware.client_address"

# Bodies over 1 MiB are refused with 413 PayloadTooLarge (docs/SPECIFICATION.md §2 rule 7).
MAX_REQUEST_BODY_BYTES = 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BODY_BYTES

# --- Static files, security -----------------------------------------------

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Only a proxy that overwrites X-Forwarded-Proto and X-Forwarded-For (the
# nginx of docker-compose.yml) makes them trustworthy: facing clients
# directly, any client could claim HTTPS or another address.
BEHIND_PROXY = env.bool("BEHIND_PROXY", default=False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BEHIND_PROXY else None
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- Logging --------------------------------------------------------------

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "observability.logging.json_formatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Every request is logged once, by api.middleware; Django's own
        # line per 4xx/5xx would repeat it (5xx tracebacks are still logged).
        "django.request": {"level": "ERROR"},
        # httpx logs each webhook delivery's request at INFO, by the address
        # it connected to; events.delivery records the outcome itself.
        "httpx": {"level": "WARNING"},
        "django.server": {"level": "ERROR"},
        # django-axes announces itself in every process; its warnings of
        # failed and locked-out logins still come through.
        "axes.apps": {"level": "WARNING"},
    },
}

configure_structlog()
