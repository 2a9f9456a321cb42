"""What the service stores and answers stays small, whatever the body holds.

An error is stored with its key and replayed for a day, so it must not
grow with what a client makes up: a body of 60,000 unknown members used to
get (and store) a 1.7 MB error listing every one of them.
"""

import json
import random
import re
import string
from typing import Any

import pytest

from api.fields import MAX_NAMED_FIELD_LENGTH, MAX_UNKNOWN_FIELDS_NAMED
from idempotency.commands import MAX_STORED_REFUSAL_BYTES
from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support.http import ORDER, Api

pytestmark = pytest.mark.django_db


def test_an_error_names_a_few_unknown_members_and_counts_the_rest(api: Api) -> None:
    body = {**ORDER, **{f"made-up-{i:05d}": i for i in range(35_000)}}

    response = api.post("/v1/orders", body, key="many-unknown")

    assert 800_000 < len(json.dumps(body)) < 1024 * 1024
    assert response.status_code == 400
    details = response.json()["details"]
    assert list(details) == [f"made-up-{i:05d}" for i in range(MAX_UNKNOWN_FIELDS_NAMED)] + [
        "nonFieldErrors"
    ]
    assert details["nonFieldErrors"] == ["34995 more unknown fields, not listed."]
    assert len(response.content) < 2_000
    assert bytes(IdempotencyKey.objects.get().answer.body) == response.content


def test_a_long_unknown_member_name_is_counted_not_repeated(api: Api) -> None:
    long_name = "n" * (MAX_NAMED_FIELD_LENGTH + 1)

    response = api.post("/v1/orders", {**ORDER, long_name: 1}, key="long-name")

    assert response.status_code == 400
    assert response.json()["details"] == {"nonFieldErrors": ["1 more unknown field, not listed."]}
    assert long_name.encode() not in response.content


def test_errors_in_every_line_of_the_largest_order_stay_within_a_stored_refusal(api: Api) -> None:
    line = {"sku": "s" * 100, "qty": "many", **{f"{'u' * 60}{i:04d}": 0 for i in range(60)}}
    body = {**ORDER, "customerId": 7, "currency": "rub", "items": [line] * 100}

    response = api.post("/v1/orders", body, key="every-line-wrong")

    assert response.status_code == 400
    assert len(response.content) <= MAX_STORED_REFUSAL_BYTES
    assert IdempotencyKey.objects.get().answer.status == 400
    # The errors of the first lines, in order, and a count of the rest.
    error = response.json()
    assert error["details"]["customerId"]
    assert "0" in error["details"]["items"]
    assert "99" not in error["details"]["items"]
    assert re.fullmatch(
        r"The request is not valid; see details\. \d+ more errors not listed\.",
        error["message"],
    )


@pytest.mark.parametrize("seed", range(5))
def test_a_refusal_of_random_members_and_values_is_stored_within_its_bound(
    api: Api, seed: int
) -> None:
    chance = random.Random(seed)

    def name() -> str:
        return "".join(chance.choices(string.printable + "é€😀", k=chance.randint(1, 90)))

    def value() -> Any:
        return chance.choice([name(), -1, 10**6, None, [], {name(): 1}, 1.5, True])

    lines = [{name(): value() for _ in range(chance.randint(1, 12))} for _ in range(100)]
    body = {name(): value() for _ in range(20)} | {"items": lines, "currency": value()}

    response = api.post("/v1/orders", body, key=f"random-{seed}")

    assert response.status_code == 400
    assert len(response.content) <= MAX_STORED_REFUSAL_BYTES
    assert bytes(IdempotencyKey.objects.get().answer.body) == response.content


@pytest.mark.urls("tests.support.probes")
def test_an_answer_too_large_to_store_is_a_final_500_and_its_effects_are_undone(api: Api) -> None:
    first = api.post("/v1/probes/oversized-answer", {}, key="oversized")
    again = api.post("/v1/probes/oversized-answer", {}, key="oversized")

    assert first.status_code == 500
    assert first.json()["error"] == "InternalError"
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert Order.objects.count() == 0
