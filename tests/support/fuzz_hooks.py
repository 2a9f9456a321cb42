"""Schemathesis hooks that make fuzzing the live service free of false failures.

schemathesis.toml names this module (``hooks``), so the schemathesis CLI
(``make fuzz``) and tests/live/test_fuzz.py, which loads the same file, send
the same cases. It imports nothing of the service: the CLI fuzzes a running
service from outside, so what is valid comes from the schema it serves, and
the catalog is the demo one (``manage.py seed_demo``).
"""

import re
import uuid
from typing import Any

import schemathesis

IDEMPOTENCY_KEY = "Idempotency-Key"
# The demo catalog's RUB items.
CATALOG_SKUS = ("ABC", "XYZ")


def with_fresh_key(case: schemathesis.Case[Any]) -> None:
    """A new key for every well-formed one, so each case is a new command.

    Otherwise cases drawn with equal keys would replay, or conflict with,
    each other. A malformed or missing key is left as drawn: it is the test.
    Well-formed is what the operation's schema says (the header's pattern).
    """
    headers = case.headers
    parameter = case.operation.headers.get(IDEMPOTENCY_KEY)
    if not headers or parameter is None:
        return
    key = headers.get(IDEMPOTENCY_KEY)
    pattern = parameter.definition.get("schema", {}).get("pattern", "")
    if isinstance(key, str) and re.fullmatch(pattern, key):
        headers[IDEMPOTENCY_KEY] = str(uuid.uuid4())


def without_drawn_cursors(case: schemathesis.Case[Any]) -> None:
    """Leave ``cursor`` and ``after`` out: none drawn names a real position.

    The service signs its cursors, and ``after`` must name an event of the
    tenant; the schema can say neither, and every drawn one is rightly
    refused (400), which the check for accepted valid data would report.
    tests/hostile/test_list_queries.py and tests/events/test_feed.py test
    them on their own.
    """
    if case.query:
        case.query.pop("cursor", None)
        case.query.pop("after", None)


# A public address, literally: valid wherever the service runs, with no name
# to resolve. Nothing listens there; the deliveries fail in the background.
WEBHOOK_URL = "https://192.0.32.10/hooks"


def with_a_callable_webhook_url(case: schemathesis.Case[Any]) -> None:
    """A URL the service will call, in a webhook endpoint drawn valid.

    The schema says a URL is a string; which ones the service calls depends
    on what their host resolves to, here and now (events.addresses), and a
    drawn one almost never resolves to a public address. A body drawn
    invalid is left as it was drawn.
    """
    body = case.body
    if case.operation.label != "POST /v1/webhook-endpoints" or not isinstance(body, dict):
        return
    if _body_drawn_invalid(case):
        return
    if isinstance(body.get("url"), str):
        body["url"] = WEBHOOK_URL


def _body_drawn_invalid(case: schemathesis.Case[Any]) -> bool:
    """Whether the body itself was drawn invalid, whatever the rest of the case.

    Not the case's mode: a case drawn invalid only in a header becomes valid
    once with_fresh_key replaces that header (schemathesis validates again
    what a hook changed), and is then held to the check for valid data.
    """
    meta = case.meta
    if meta is None:
        return False
    return any(
        location.name == "BODY" and component.mode.is_negative
        for location, component in meta.components.items()
    )


def with_catalog_skus(case: schemathesis.Case[Any]) -> None:
    """Orders of the demo catalog, so that workflows get past placing one.

    Drawn SKUs are almost never in the catalog. In a case drawn valid, each
    SKU becomes a RUB item, picked by its length, and in one order in four
    the currency becomes USD, to meet ``CurrencyMismatch`` too. A case drawn
    invalid is left alone: it must stay as invalid as it was drawn, or the
    service would rightly accept what schemathesis expects it to refuse.
    """
    body = case.body
    if case.operation.label != "POST /v1/orders" or not isinstance(body, dict):
        return
    if case.meta is not None and case.meta.generation.mode.is_negative:
        return
    items = body.get("items")
    for item in items if isinstance(items, list) else []:
        sku = item.get("sku") if isinstance(item, dict) else None
        if isinstance(item, dict) and isinstance(sku, str):
            item["sku"] = CATALOG_SKUS[len(sku) % 2]
    customer = body.get("customerId")
    if isinstance(customer, str):
        body["currency"] = "USD" if len(customer) % 4 == 0 else "RUB"


@schemathesis.hook
def before_call(
    context: schemathesis.HookContext, case: schemathesis.Case[Any], kwargs: Any
) -> None:
    """Every call, from the CLI, the pytest integration and stateful workflows alike."""
    with_catalog_skus(case)
    with_a_callable_webhook_url(case)
    with_fresh_key(case)
    without_drawn_cursors(case)
