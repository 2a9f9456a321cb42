# The two commands of the README, `make run` and `make test`, and `make check`,
# the quick loop. They create .venv and install the locked dependencies when
# needed.

# Any Python from 3.11 to 3.13: `make run PYTHON=python3.13`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PORT ?= 8000
# Where `make run` keeps its database, task queue and secret key.
VAR_DIR ?= var
# The service's packages, as pyproject.toml's [tool.importlinter] lists them
# (tests/architecture holds that list to the repository's folders); read by
# the venv's Python, so only by recipes that run after it is made.
PACKAGES = $(shell $(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["importlinter"]["root_packages"])')

# Tests run on PostgreSQL and a real broker; these default to the local servers.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/order_service
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15

# make check leaves out the tests that start processes, proxies or a browser,
# need a tool beyond PostgreSQL and Redis, or cost seconds each: a worker,
# a real commit (pyproject.toml declares the markers, tests/conftest.py
# puts them on the tests).
CHECK_MARKERS := not live and not proxy and not browser and not fault and not promtool and not worker and not transactional and not slow

.PHONY: install install-dev run test check typecheck screenshot faults failover demo lint fmt lock bench bench-operations bench-replication soak soak-http fuzz conformance clean FORCE

# The venv remembers the interpreter that made it (.venv/.python). A venv
# that works is never removed here, whatever made it: `make run` may be
# serving from it, and would break. Made by another Python, it stops make
# with the ways out; one that works but has no record (made by hand, or by
# an older Makefile) is adopted when its Python is PYTHON's. Only a venv
# left half-made by a failed `python -m venv` (no Python that runs pip), from
# which nothing can run, is removed and made again. An unsupported Python
# stops here, before anything is installed.
$(VENV)/.python: FORCE
	@made_by="$$($(PYTHON) -c 'import sys; print(sys.version.split()[0], sys.base_prefix)')" \
	   || { echo "make: PYTHON=$(PYTHON) does not run; pass PYTHON=python3.11 (to 3.13)" >&2; exit 1; }; \
	 $(PYTHON) -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' \
	   || { echo "make: the service needs Python 3.11 to 3.13, and PYTHON=$(PYTHON) is $$made_by;" \
	          "pass PYTHON=python3.12 (or another)" >&2; exit 1; }; \
	 recorded="$$(cat $@ 2>/dev/null)"; \
	 if [ -z "$$recorded" ] && $(PY) -m pip --version >/dev/null 2>&1; then \
	   recorded="$$($(PY) -c 'import sys; print(sys.version.split()[0], sys.base_prefix)')" \
	     && [ "$$recorded" = "$$made_by" ] && echo "$$made_by" > $@; \
	 fi; \
	 if [ -z "$$recorded" ]; then \
	   rm -rf $(VENV) && $(PYTHON) -m venv $(VENV) && echo "$$made_by" > $@; \
	 elif [ "$$recorded" != "$$made_by" ]; then \
	   echo "make: $(VENV) was made by Python $$recorded, and PYTHON=$(PYTHON) is $$made_by." >&2; \
	   echo "  It is kept: a service (make run) may be running from it. Use it with" >&2; \
	   echo "  PYTHON=$(VENV)/bin/python, make another beside it with" >&2; \
	   echo "  VENV=.venv-$$(echo $$made_by | cut -d. -f1,2), or stop what runs from it and remove it" >&2; \
	   echo "  (make clean, which removes $(VAR_DIR)/ as well)." >&2; \
	   exit 1; \
	 fi

$(VENV)/.runtime: requirements.lock pyproject.toml $(VENV)/.python
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

# The Python client (client/) and the conformance kit (conformance/) are
# packages of their own; their dependencies (httpx, standardwebhooks) come
# locked with the dev tools.
$(VENV)/.dev: requirements-dev.lock client/pyproject.toml conformance/pyproject.toml $(VENV)/.runtime
	$(PY) -m pip install --quiet -r requirements-dev.lock
	$(PY) -m pip install --quiet --no-deps -e client
	$(PY) -m pip install --quiet --no-deps -e conformance
	touch $@

install: $(VENV)/.runtime

install-dev: $(VENV)/.dev

## run: the service on the embedded default (SQLite file + SQLite broker in
## $(VAR_DIR)/), with two Celery workers (payments with beat, and webhook
## deliveries: docs/DEPLOYING.md, "Workers") beside gunicorn, on $(PORT).
## Each run issues a new demo token and revokes the previous one.
##
## gunicorn and the workers run in process groups of their own (bash's set -m
## while they start), out of reach of the terminal's Ctrl-C: a non-interactive
## shell would start them with SIGINT ignored, and the worker would take a
## second signal as an order to shut down cold. The shell catches Ctrl-C (or
## SIGTERM, SIGHUP), sends each of them one SIGTERM (a warm shutdown for the
## worker, a graceful one for gunicorn) and waits for both.
##
## The port is tried first, as gunicorn binds it (SO_REUSEADDR): taken, run
## stops there, before it migrates or revokes the last token, rather than
## when gunicorn gives up on it. Then $(VAR_DIR)/run.lock is locked for as
## long as the run's processes live (flock, which the kernel releases when
## the last of them ends, however it ends): a second run on the same
## $(VAR_DIR)/ would have revoked the first one's token and shared its
## queue, so it stops there too. A second run beside the first needs both
## a port and a VAR_DIR of its own.
## The payments worker runs PAYMENT_SLOTS tasks at once, in processes
## (prefork, as deployed): two, the least docs/DEPLOYING.md ("Workers")
## allows, so that one slow charge does not hold every payment behind it.
## The deliveries worker runs DELIVERY_SLOTS attempts at once, in threads (an
## attempt waits on a receiver, not on a CPU): more than a tenant's
## WEBHOOK_TENANT_CONCURRENCY (4), so that one tenant's slow receivers leave
## slots for the others (docs/DEPLOYING.md, "Workers"). Both serve their
## metrics on 127.0.0.1 only (WORKER_METRICS_ADDR): nothing off the machine
## scrapes them.
PAYMENT_SLOTS ?= 2
DELIVERY_SLOTS ?= 8
run: SHELL := /bin/bash
run: install
	@$(PY) -c 'import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' \
	   $(PORT) 2>/dev/null \
	   || { echo "make run: port $(PORT) on 127.0.0.1 is taken (another make run?); stop what" \
	             "listens there, or start this one beside it with" \
	             "PORT=$$(( $(PORT) + 1 )) VAR_DIR=$(VAR_DIR)-2" >&2; exit 1; }
	@export VAR_DIR="$(abspath $(VAR_DIR))"; \
	 mkdir -p "$$VAR_DIR" && exec 9>>"$$VAR_DIR/run.lock" || exit 1; \
	 $(PY) -c 'import fcntl; fcntl.flock(9, fcntl.LOCK_EX | fcntl.LOCK_NB)' 2>/dev/null \
	   || { echo "make run: another make run (port $$(cat "$$VAR_DIR/run.lock")) is serving from" \
	             "$$VAR_DIR/ (its database, task queue and demo token); stop it, or start" \
	             "this one beside it with PORT=$(PORT) VAR_DIR=$(VAR_DIR)-2" >&2; exit 1; }; \
	 echo $(PORT) > "$$VAR_DIR/run.lock"; \
	 export WORKER_METRICS_ADDR=127.0.0.1; \
	 $(PY) manage.py migrate --noinput -v0 \
	 && $(PY) manage.py seed_demo \
	 && $(PY) manage.py collectstatic --noinput -v0 \
	 && token=$$($(PY) manage.py create_api_client demo demo --revoke-earlier 2>/dev/null \
	              | tail -n 1) \
	 || exit 1; \
	 set -m; \
	 $(BIN)/celery -A config worker -Q celery --beat \
	   --pool=prefork --concurrency=$(PAYMENT_SLOTS) --loglevel=INFO & worker=$$!; \
	 WORKER_METRICS_PORT=9541 \
	   $(BIN)/celery -A config worker -Q webhooks -n deliveries@%h \
	     --pool=threads --concurrency=$(DELIVERY_SLOTS) --loglevel=INFO \
	   & deliveries=$$!; \
	 WEB_CONCURRENCY=$${WEB_CONCURRENCY:-2} BIND=127.0.0.1:$(PORT) \
	   $(BIN)/gunicorn -c config/gunicorn.py config.wsgi:application & web=$$!; \
	 set +m; \
	 trap 'kill -TERM $$worker $$deliveries $$web 2>/dev/null; wait' INT TERM HUP; \
	 printf '\nOrder service on http://127.0.0.1:$(PORT) (docs: /docs/); Ctrl-C stops it.\n'; \
	 printf 'Demo API token (the previous one is revoked): %s\n\n' "$$token"; \
	 printf 'curl -si http://127.0.0.1:$(PORT)/v1/orders \\\n'; \
	 printf '  -H "Authorization: Bearer %s" \\\n' "$$token"; \
	 printf '  -H "Idempotency-Key: $$(python3 -c %s)" \\\n' "'import uuid; print(uuid.uuid4())'"; \
	 printf '  -H "Content-Type: application/json" \\\n'; \
	 printf '  -d %s\n\n' "'{\"customerId\": \"c-1\", \"items\": [{\"sku\": \"ABC\", \"qty\": 2}], \"currency\": \"RUB\"}'"; \
	 wait $$web; status=$$?; \
	 kill -TERM $$worker $$deliveries 2>/dev/null; wait $$worker $$deliveries 2>/dev/null; \
	 exit $$status

# mypy needs every module at once to check one: the service's packages and
# the tests, then the client and the conformance kit, packages of their own.
# Their options differ, so each keeps a cache of its own: in one cache, each
# run found the other's entries stale and checked everything again (15 s of
# each check).
define mypy_all
	$(BIN)/mypy $(PACKAGES) tests
	$(BIN)/mypy --config-file client/pyproject.toml --cache-dir .mypy_cache/client \
	  client/order_service_client
	$(BIN)/mypy --config-file conformance/pyproject.toml --cache-dir .mypy_cache/conformance \
	  conformance/idempotency_conformance
endef

# Debian's patroni and etcd-server, which the replicated PostgreSQL runs on
# (tests/support/patroni.py), installed when missing.
define patroni_installed
	@command -v patroni >/dev/null && command -v etcd >/dev/null \
	  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q patroni etcd-server; }
endef

## test: lint and type-check, then the whole suite on PostgreSQL and Redis.
test: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(mypy_all)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	  $(BIN)/pytest $(PYTEST_ARGS)

## check: the quick loop, in about a minute: make test's lint and type
## checks, then the tests that need only PostgreSQL and Redis (none of the
## markers CHECK_MARKERS names); make test runs every test. PYTEST_ARGS
## narrows it further: make check PYTEST_ARGS=tests/orders.
check: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(mypy_all)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	  $(BIN)/pytest -q -m "$(CHECK_MARKERS)" $(PYTEST_ARGS)

## typecheck: mypy alone, with the tools .venv holds and no install:
## pre-commit's hook runs it.
typecheck:
	$(mypy_all)

## screenshot: docs/swagger-ui.png taken again from Swagger UI as the service
## serves it (tests/docs/test_docs_browser.py), with the operations it shows
## written into the file for make check to compare with the schema; commit it.
screenshot: install-dev
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} REFRESH_SCREENSHOT=1 \
	  $(BIN)/pytest -q tests/docs/test_docs_browser.py::test_swagger_ui_renders_every_endpoint_offline

## faults: the fault-injection scenarios alone (make test runs them too): each
## starts the service, injects one fault and prints its figures at the end.
faults: install-dev
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	  $(BIN)/pytest tests/faults

## failover: the primary of a Patroni cluster killed under load, FAILOVER_RUNS
## times (5) with a synchronous standby and as many with an asynchronous one,
## with the WAL on its way to the standby for each of FAILOVER_LINK_DELAYS_MS
## ("0 50 500"): what was acknowledged and then lost, and the double charges that
## follow (tests/bench/failover.py).
failover: install-dev
	$(patroni_installed)
	$(PY) -m tests.bench.failover

## demo: exactly once over a bad network (tests/demo): orders placed and paid
## through the Python client and a proxy that drops 30 % of the answers, a
## webhook receiver handling each event once, then counted from the database. On the embedded default, or on PostgreSQL and
## Redis: make demo DATABASE_URL=postgres://… CELERY_BROKER_URL=redis://…
## (DEMO_ORDERS, DEMO_DROP, DEMO_RESET, BASE_URL: tests/demo/__main__.py).
demo: install-dev
	$(PY) -m tests.demo

## bench: ratios of what idempotency costs, and 202-to-succeeded of a payment,
## on PostgreSQL and Redis (a database of its own, order_service_bench), driven
## by wrk (Debian's package, installed here when missing).
bench: install-dev
	@command -v wrk >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk; }
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} $(PY) -m tests.bench

## bench-replication: first executions with a synchronous standby and with an
## asynchronous one, on a Patroni cluster, and their ratio
## (tests/bench/replication.py; BENCH_LINK_DELAY_MS puts the standby further away).
bench-replication: install-dev
	@command -v wrk >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk; }
	$(patroni_installed)
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} $(PY) -m tests.bench.replication

## bench-operations: a scrape of /metrics and the operator's statements at 10^3
## and 10^6 ended operations, and their ratio (tests/bench/operations.py; a
## database of its own, order_service_bench_operations).
bench-operations: install-dev
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} $(PY) -m tests.bench.operations

## soak: payments at twice the rate one worker serves them, for a minute, then
## none (tests/bench/soak.py): the messages published per payment, the queue's
## peak length, and the time until the last payment ends against the worker's
## rate alone. On PostgreSQL and Redis (a database of its own, order_service_soak);
## SOAK_SECONDS, SOAK_LOAD, SOAK_PROVIDER_LATENCY change the run.
soak: install-dev
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} $(PY) -m tests.bench.soak

## soak-http: 30,000 mixed requests (creations, replays, reads, lists, payments,
## 404s) against gunicorn recycling its workers every 200 requests
## (tests/bench/soak_http.py): each worker's RSS, the metrics directory's files
## and bytes, one scrape's time and one restart's CPU, at the start and the end.
## On PostgreSQL and Redis (a database of its own, order_service_soak_http);
## SOAK_HTTP_REQUESTS, SOAK_HTTP_MAX_REQUESTS (0: never), SOAK_HTTP_WORKERS and
## SOAK_HTTP_ARCHIVE=0 (dead workers' metrics files kept, as before) change the run.
soak-http: install-dev
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} $(PY) -m tests.bench.soak_http

## fuzz: schemathesis against a running service (such as `make run`'s), with an
## API token: make fuzz TOKEN=osk_… [BASE_URL=http://127.0.0.1:8000].
## schemathesis.toml holds its configuration and names its hooks.
fuzz: install-dev
	@test -n "$(TOKEN)" || { echo 'make fuzz needs TOKEN=<API token> (make run prints one)' >&2; exit 2; }
	@TOKEN='$(TOKEN)' $(BIN)/schemathesis run $(or $(BASE_URL),http://127.0.0.1:$(PORT))/v1/schema/

## conformance: the idempotency conformance kit (conformance/README.md) against a
## running service (such as `make run`'s), from outside: make conformance
## TOKEN=osk_… [OTHER_TOKEN=osk_… of another principal] [BASE_URL=http://127.0.0.1:8000].
## Without OTHER_TOKEN (manage.py create_api_client TENANT NAME prints one),
## the check of keys scoped by principal is skipped.
conformance: install-dev
	@test -n "$(TOKEN)" || { echo 'make conformance needs TOKEN=<API token> (make run prints one)' >&2; exit 2; }
	@$(BIN)/idempotency-conformance --base-url $(or $(BASE_URL),http://127.0.0.1:$(PORT)) \
	  --token '$(TOKEN)' $(if $(OTHER_TOKEN),--other-token '$(OTHER_TOKEN)')

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(mypy_all)
	$(BIN)/lint-imports --no-cache

fmt: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## lock: re-resolve requirements*.lock from pyproject.toml: one lock for every
## supported Python (markers where they differ), naming no package index.
lock: install-dev
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --group dev --universal --python-version 3.11 \
	  -o requirements-dev.lock

clean:
	rm -rf $(VENV) $(VAR_DIR) staticfiles

FORCE:
