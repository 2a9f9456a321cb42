"""Migrations that move stored answers keep every answer, forwards and backwards.

A stored answer is what every retry of its key gets back, byte for byte,
until the key expires: a migration that lost or changed one would make a
retry execute its command again, or answer it differently.
"""

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = ("idempotency", "0003_unique_leads_with_principal")
AFTER = ("idempotency", "0004_answer_of_its_own")
BODY = b'{"status":"succeeded","orderId":"ord_1"}'
HEADERS = {"Content-Type": "application/json", "Location": "/v1/orders/ord_1"}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def executor() -> Iterator[MigrationExecutor]:
    """A migration executor; the schema is migrated back to the latest after the test."""
    executor = MigrationExecutor(connection)
    yield executor
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def migrate(executor: MigrationExecutor, target: tuple[str, str]) -> Apps:
    """Migrate the idempotency app to ``target``; the models as they are there."""
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


def test_0004_moves_each_answer_into_a_row_of_its_own_and_back(
    executor: MigrationExecutor,
) -> None:
    apps = migrate(executor, BEFORE)
    tenant = apps.get_model("accounts", "Tenant").objects.create(slug="acme")
    principal = apps.get_model("accounts", "Principal").objects.create(tenant=tenant, name="a")
    now = timezone.now()
    apps.get_model("idempotency", "IdempotencyKey").objects.create(
        tenant=tenant,
        principal=principal,
        key="K",
        request_method="POST",
        request_path="/v1/orders",
        fingerprint="f" * 64,
        field_digests={"/currency": "0123456789abcdef"},
        response_status=201,
        response_body=BODY,
        response_headers=HEADERS,
        created_at=now,
        expires_at=now + timedelta(days=1),
    )

    apps = migrate(executor, AFTER)
    key = apps.get_model("idempotency", "IdempotencyKey").objects.get(key="K")
    answer = apps.get_model("idempotency", "StoredAnswer").objects.get(key=key)
    apps = migrate(executor, BEFORE)
    restored = apps.get_model("idempotency", "IdempotencyKey").objects.get(key="K")

    assert (answer.status, bytes(answer.body), answer.headers) == (201, BODY, HEADERS)
    assert key.field_digests == {"/currency": "0123456789abcdef"}
    assert (restored.response_status, bytes(restored.response_body)) == (201, BODY)
    assert restored.response_headers == HEADERS
