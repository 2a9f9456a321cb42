"""The feed never shows an event before one a consumer has already read past.

A transaction that started first may commit last. Its event must not
appear behind events a consumer has already read (it would be skipped for
good by a consumer reading ``after=``): the feed holds every event back
until each transaction older than its own has ended
(events.selectors.feed_of).
"""

import threading
from typing import Any

import pytest
from django.db import connections, transaction

from accounts.models import Tenant
from events.services import record_event
from tests.support.http import Api, body_of

pytestmark = pytest.mark.django_db(transaction=True)


def feed(api: Api) -> list[str]:
    return [e["links"]["resource"] for e in body_of(api.get("/v1/events"))["results"]]


def test_an_event_waits_for_the_transactions_older_than_its_own(
    api: Api, order_body: dict[str, Any]
) -> None:
    tenant = Tenant.objects.get(pk=api.principal.tenant_id)
    written, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow_effect() -> None:
        try:
            with transaction.atomic():
                record_event(
                    tenant=tenant,
                    event_type="order.created",
                    resource="/v1/orders/ord_slow",
                    data={},
                )
                written.set()
                assert release.wait(30)
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=slow_effect)
    thread.start()
    assert written.wait(30)
    try:
        # A newer transaction commits first.
        created = api.post("/v1/orders", order_body, key="K")
        assert created.status_code == 201
        order_id = body_of(created)["orderId"]

        assert feed(api) == []
    finally:
        release.set()
        thread.join()

    assert feed(api) == ["/v1/orders/ord_slow", f"/v1/orders/{order_id}"]
