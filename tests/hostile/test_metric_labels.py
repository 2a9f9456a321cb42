"""What a client sends never becomes a metric label value.

Every distinct label value is a time series that each scrape carries for
the life of the process, so a client choosing values (a random method or
path per request) could grow ``/metrics`` without bound, without a token.
"""

import random
import re
import string

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def series(client: Client) -> set[str]:
    text = client.get("/metrics").content.decode()
    return set(re.findall(r"^(http_request\w+\{[^}]*\})", text, flags=re.MULTILINE))


def random_word(rng: random.Random, length: int = 20) -> str:
    return "".join(rng.choices(string.ascii_uppercase, k=length))


def test_random_methods_and_paths_add_no_series(client: Client) -> None:
    rng = random.Random(7)
    client.generic(random_word(rng), f"/{random_word(rng).lower()}")
    client.generic(random_word(rng), "/healthz")
    series(client)  # the scrape itself is a request too
    before = series(client)

    for _ in range(300):
        client.generic(random_word(rng), f"/{random_word(rng).lower()}")
        client.generic(random_word(rng), "/healthz")

    after = series(client)
    assert after == before
    assert any('method="other"' in s for s in after)
    assert not any(re.search(r'method="[A-Z]{20}"', s) for s in after)
