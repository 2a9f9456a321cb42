"""The protocol's statements write and read every column of their models, and the protocol none.

idempotency/statements.py names each model's concrete fields and takes a row
by their attribute names, so a column added to ``IdempotencyKey``,
``StoredAnswer`` or ``StorageUsage`` is written and read back with no edit
there; a row that leaves out a field with no default fails naming it.
"""

import ast
import re
from collections.abc import Callable, Collection
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Field, Model
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Principal
from accounts.services import create_api_client
from idempotency import commands, statements
from idempotency.models import IdempotencyKey, StorageUsage, StoredAnswer
from idempotency.statements import Row

pytestmark = pytest.mark.django_db

INSERT = re.compile(
    r'INSERT INTO "(?P<table>\w+)" \((?P<columns>[^)]*)\) VALUES \((?P<values>[^)]*)\)'
)
# Words of SQL that a statement of the protocol would carry.
SQL = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RETURNING)\b"
    r"|SET LOCAL|ON CONFLICT"
)


@pytest.fixture
def principal() -> Principal:
    return create_api_client(tenant_slug="acme", name="alice").principal


def a_key(principal: Principal, key: str = "statements") -> Row:
    now = timezone.now()
    return {
        "tenant_id": principal.tenant_id,
        "principal_id": principal.pk,
        "key": key,
        "request_method": "POST",
        "request_path": "/v1/orders",
        "fingerprint": "f" * 64,
        "field_digests": {"/customerId": "d" * 16},
        "created_at": now - timedelta(seconds=1),
        "expires_at": now + timedelta(hours=1),
    }


def an_answer(key_id: int) -> Row:
    return {"key_id": key_id, "status": 201, "body": b'{"id": "o"}', "headers": {"Location": "/"}}


def a_usage(key: Row, *, used: int = 1234) -> Row:
    return {
        "principal_id": key["principal_id"],
        "expires_by": key["expires_at"],
        "shard": 3,
        "bytes": used,
    }


def inserted_columns(queries: CaptureQueriesContext) -> dict[str, list[str]]:
    """Each table an INSERT wrote, and its columns; every column given a placeholder."""
    inserts = {}
    for query in queries.captured_queries:
        for insert in INSERT.finditer(query["sql"]):
            columns = [name.strip().strip('"') for name in insert["columns"].split(",")]
            assert len(insert["values"].split(",")) == len(columns), query["sql"]
            inserts[insert["table"]] = columns
    return inserts


def fields_of(model: type[Model], *, primary_key: bool) -> list["Field[Any, Any]"]:
    return [f for f in model._meta.concrete_fields if primary_key or not f.primary_key]


def assert_stored(
    model: type[Model], stored: Model, row: Row, *, but: Collection[str] = ()
) -> None:
    """Every field of ``model`` given in ``row`` (all but ``but``) has the row's value."""
    for field in fields_of(model, primary_key=True):
        if field.attname in but:
            continue
        assert field.attname in row, f"the test's row of {model.__name__} has no {field.attname}"
        assert getattr(stored, field.attname) == row[field.attname], (
            f"{model.__name__}.{field.name} is not written or read by idempotency/statements.py"
        )


def claim_and_store(principal: Principal) -> tuple[Row, Row, Row]:
    key = a_key(principal)
    usage = a_usage(key)
    with transaction.atomic(), connection.cursor() as cursor:
        claimed = statements.claim(cursor, key)
        assert claimed is not None
        key["id"] = claimed.id
        answer = an_answer(claimed.id)
        # Not the outermost block (the test's transaction is): no COMMIT sent.
        statements.store(cursor, answer, usage, ends_transaction=False)
    return key, answer, usage


def test_a_claim_inserts_every_column_of_the_key_with_the_rows_value(principal: Principal) -> None:
    key = a_key(principal)

    with CaptureQueriesContext(connection) as queries, connection.cursor() as cursor:
        claimed = statements.claim(cursor, key)

    assert claimed is not None
    assert claimed.used == 0
    columns = [f.column for f in fields_of(IdempotencyKey, primary_key=False)]
    assert inserted_columns(queries)[IdempotencyKey._meta.db_table] == columns
    assert_stored(IdempotencyKey, IdempotencyKey.objects.get(pk=claimed.id), key, but={"id"})


def test_a_claim_of_a_key_that_exists_inserts_nothing(principal: Principal) -> None:
    claim_and_store(principal)

    with connection.cursor() as cursor:
        assert statements.claim(cursor, a_key(principal)) is None

    assert IdempotencyKey.objects.count() == 1


def test_a_store_inserts_every_column_of_the_answer_and_of_the_total(principal: Principal) -> None:
    with CaptureQueriesContext(connection) as queries:
        key, answer, usage = claim_and_store(principal)

    inserts = inserted_columns(queries)
    for model, primary_key in ((StoredAnswer, True), (StorageUsage, False)):
        columns = [f.column for f in fields_of(model, primary_key=primary_key)]
        assert inserts[model._meta.db_table] == columns
    assert_stored(StoredAnswer, StoredAnswer.objects.get(pk=key["id"]), answer)
    assert_stored(StorageUsage, StorageUsage.objects.get(), usage, but={"id"})


def test_a_store_adds_to_the_total_of_its_bucket(principal: Principal) -> None:
    key, _, _ = claim_and_store(principal)
    again = a_key(principal, key="again")

    with connection.cursor() as cursor:
        claimed = statements.claim(cursor, again)
        assert claimed is not None
        assert claimed.used == 1234
        more = a_usage(key, used=6)
        statements.store(cursor, an_answer(claimed.id), more, ends_transaction=False)

    assert StorageUsage.objects.get().bytes == 1240


def test_a_field_left_out_of_a_row_takes_its_default(principal: Principal) -> None:
    key = a_key(principal)
    del key["field_digests"]

    with connection.cursor() as cursor:
        claimed = statements.claim(cursor, key)

    assert claimed is not None
    assert IdempotencyKey.objects.get(pk=claimed.id).field_digests == {}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda row: row.pop("fingerprint"), "fingerprint"),
        (lambda row: row.update(fingerprints="f"), "fingerprints"),
    ],
    ids=["a field with no default left out", "a name that is no field's"],
)
def test_a_row_that_is_not_the_models_is_refused_naming_the_field(
    principal: Principal, change: Callable[[Row], object], named: str
) -> None:
    key = a_key(principal)
    change(key)

    with connection.cursor() as cursor, pytest.raises(TypeError, match=named):
        statements.claim(cursor, key)

    assert not IdempotencyKey.objects.exists()


def test_find_reads_every_column_of_the_key_but_its_field_digests_and_of_its_answer(
    principal: Principal,
) -> None:
    key, answer, _ = claim_and_store(principal)

    found = statements.find(principal, key["key"])

    assert found is not None
    assert found.get_deferred_fields() == {"field_digests"}
    assert_stored(IdempotencyKey, found, key, but={"field_digests"})
    assert_stored(StoredAnswer, found.answer, answer, but={"body"})
    assert bytes(found.answer.body) == answer["body"]


def test_find_does_not_find_another_principals_key(principal: Principal) -> None:
    key, _, _ = claim_and_store(principal)
    other = create_api_client(tenant_slug="acme", name="bob").principal

    assert statements.find(other, key["key"]) is None


def test_the_protocol_sends_no_statement_of_its_own() -> None:
    # Every statement and every use of the driver is idempotency/statements.py's.
    source = Path(commands.__file__).read_text()

    sql = [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value)
    ]

    assert sql == []
    assert "psycopg" not in source
