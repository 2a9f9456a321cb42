"""Facts the documents state, held to the code that makes them true.

Each of these was once said two ways in two places. The figure now lives
where its reason is written, and this test fails when the code moves away
from it, naming the document to correct.
"""

import re
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError

from api.errors import render_exception
from idempotency.fingerprint import MAX_FIELD_DIGESTS, fingerprint_request

ROOT = Path(__file__).resolve().parents[2]
DECISIONS = ROOT / "docs" / "decisions"


def _order_of(lines: int) -> dict[str, Any]:
    return {
        "customerId": "c-1",
        "items": [{"sku": "ABC", "qty": 1} for _ in range(lines)],
        "currency": "RUB",
    }


def _parts(value: Any) -> int:
    """Every member and element under ``value``, at any depth: the parts a digest could name."""
    if isinstance(value, dict):
        return sum(1 + _parts(child) for child in value.values())
    if isinstance(value, list):
        return sum(1 + _parts(child) for child in value)
    return 0


@pytest.mark.django_db
def test_an_order_of_100_lines_has_303_parts_and_the_budget_names_76_lines_whole() -> None:
    order = _order_of(100)

    digests = fingerprint_request(method="POST", path="/v1/orders", body=order).field_digests

    assert _parts(order) == 303
    assert len(digests) == MAX_FIELD_DIGESTS
    assert "/items/75/qty" in digests
    assert "/items/76/sku" not in digests
    assert "/items/99" in digests
    for document in (
        ROOT / "idempotency" / "fingerprint.py",
        DECISIONS / "0005-conflicts-name-fields-by-json-pointer.md",
    ):
        assert "100 lines has 303 parts" in re.sub(r"\s+#?\s*", " ", document.read_text()), document


def test_a_database_failure_is_a_503_in_the_code_and_in_every_decision() -> None:
    response = render_exception(OperationalError("connection lost"))
    # "a database failure (`500`" or "as a database failure: `500`": the
    # sentence that once said the wrong status.
    wrong = re.compile(r"database failure[^.]{0,40}`500`")

    assert response.status_code == 503
    assert response.has_header("Retry-After")
    stale = [
        path.name
        for path in sorted(DECISIONS.glob("*.md"))
        if wrong.search(re.sub(r"\s+", " ", path.read_text()))
    ]
    assert stale == []
