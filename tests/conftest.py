import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client

from accounts.services import create_api_client


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.exit(
            "The suite runs on PostgreSQL: run `make test`, or set DATABASE_URL=postgres://…",
            returncode=2,
        )


@dataclass
class Api:
    """A client authenticated as one principal, speaking JSON."""

    client: Client
    token: str
    principal: Any

    def headers(self, key: str | None = None, **extra: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}", **extra}
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers

    def post(self, path: str, body: Any = None, *, key: str | None = None, **headers: str) -> Any:
        raw = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.post(
            path,
            data=raw if body is not None else "",
            content_type="application/json",
            headers=self.headers(key, **headers),
        )

    def get(self, path: str, **headers: str) -> Any:
        return self.client.get(path, headers=self.headers(**headers))


@pytest.fixture
def catalog(db: None) -> None:
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115


@pytest.fixture
def api(db: None, catalog: None) -> Api:
    issued = create_api_client(tenant_slug="acme", name="alice")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


@pytest.fixture
def other_api(db: None, catalog: None) -> Api:
    """Another principal of the same tenant."""
    issued = create_api_client(tenant_slug="acme", name="bob")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


@pytest.fixture
def stranger_api(db: None, catalog: None) -> Api:
    """A principal of another tenant."""
    issued = create_api_client(tenant_slug="globex", name="carol")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


ORDER = {"customerId": "cust-1", "items": [{"sku": "ABC", "qty": 2}], "currency": "RUB"}


@pytest.fixture
def order_body() -> dict[str, Any]:
    return json.loads(json.dumps(ORDER))


def run_concurrently(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` in ``n`` threads released at the same instant.

    Each thread has its own database connection (Django's are per thread),
    so these are real concurrent transactions; each closes its connection.
    """
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results
