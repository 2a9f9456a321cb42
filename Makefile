# The two commands of the README: `make run` and `make test`.
# Both create .venv and install the locked dependencies when needed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PORT ?= 8000
PACKAGES := config api observability accounts idempotency operations provider orders

# Tests run on PostgreSQL and a real broker; these default to the local servers.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/order_service
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15

.PHONY: install install-dev run test lint fmt lock bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.runtime: requirements.lock pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.dev: requirements-dev.lock $(VENV)/.runtime
	$(PY) -m pip install --quiet -r requirements-dev.lock
	touch $@

install: $(VENV)/.runtime

install-dev: $(VENV)/.dev

## run: the service on the embedded default (SQLite file + SQLite broker in var/),
## with a Celery worker and beat beside gunicorn. Ctrl-C stops all three.
run: install
	@mkdir -p var
	@$(PY) manage.py migrate --noinput -v0
	@$(PY) manage.py seed_demo
	@$(PY) manage.py collectstatic --noinput -v0
	@token=$$($(PY) manage.py create_api_client demo demo 2>/dev/null | tail -n 1); \
	 trap 'trap - INT TERM EXIT; kill 0' INT TERM EXIT; \
	 $(BIN)/celery -A config worker --beat --pool=solo --loglevel=INFO \
	   --schedule=var/celerybeat-schedule & \
	 printf '\nOrder service on http://127.0.0.1:$(PORT) (docs: /docs/)\n'; \
	 printf 'Demo API token: %s\n\n' "$$token"; \
	 printf 'curl -si http://127.0.0.1:$(PORT)/v1/orders \\\n'; \
	 printf '  -H "Authorization: Bearer %s" \\\n' "$$token"; \
	 printf '  -H "Idempotency-Key: $$(python3 -c %s)" \\\n' "'import uuid; print(uuid.uuid4())'"; \
	 printf '  -H "Content-Type: application/json" \\\n'; \
	 printf '  -d %s\n\n' "'{\"customerId\": \"c-1\", \"items\": [{\"sku\": \"ABC\", \"qty\": 2}], \"currency\": \"RUB\"}'"; \
	 WEB_CONCURRENCY=$${WEB_CONCURRENCY:-2} BIND=127.0.0.1:$(PORT) \
	   $(BIN)/gunicorn -c config/gunicorn.py config.wsgi:application

## test: lint and type-check, then the whole suite on PostgreSQL and Redis.
test: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PACKAGES) tests
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	  $(BIN)/pytest $(PYTEST_ARGS)

## bench: ratios of what idempotency costs, and 202-to-succeeded of a payment,
## on PostgreSQL and Redis (a database of its own, order_service_bench).
bench: install-dev
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} $(PY) -m tests.bench

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PACKAGES) tests
	$(BIN)/lint-imports --no-cache

fmt: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## lock: re-resolve requirements*.lock from pyproject.toml.
lock: install-dev
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --group dev --python-version 3.11 -o requirements-dev.lock

clean:
	rm -rf $(VENV) var staticfiles
