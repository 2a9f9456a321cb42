"""The admin: every page renders, records are read-only, tokens are shown once."""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Model
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from accounts.models import ApiToken, Principal, Tenant
from events.models import Delivery, Event, WebhookEndpoint
from idempotency.admin import RESPONSE_BODY_PREVIEW_BYTES
from idempotency.models import IdempotencyKey, StoredAnswer
from operations.models import Operation
from orders.models import Order, Payment, Product
from provider.models import Attempt, LedgerEntry
from tests.support.http import Api, body_of

pytestmark = pytest.mark.django_db

# A whole token: the prefix the admin shows (its first 12 characters) is too short to match.
TOKEN = re.compile(r"osk_[A-Za-z0-9_-]{40,}")


@pytest.fixture(autouse=True)
def plain_static_files(settings: Settings) -> None:
    # Admin pages link their CSS and JS; the manifest storage would need a
    # collectstatic first, which these tests have no use for.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@dataclass
class Records:
    order: Order
    payment: Payment
    operation: Operation
    key: IdempotencyKey
    ledger_entry: LedgerEntry
    attempt: Attempt


@pytest.fixture
def records(api: Api, order_body: dict[str, Any]) -> Records:
    """An order and its payment placed through the API, and the simulator's records of a charge."""
    created = api.post("/v1/orders", order_body, key="admin-order")
    assert created.status_code == 201
    order = Order.objects.get(id=json.loads(created.content)["orderId"])
    paid = api.post(
        "/v1/payments",
        {
            "orderId": order.id,
            "amount": order.total_amount,
            "currency": order.currency,
            "paymentMethod": "pm_card_ok",
        },
        key="admin-payment",
    )
    assert paid.status_code == 202
    payment = Payment.objects.get(pk=json.loads(paid.content)["paymentId"])
    # Written directly: the simulator refuses to run inside the test's transaction.
    ledger_entry = LedgerEntry.objects.create(
        charge_id="ch_admin",
        kind=LedgerEntry.Kind.CHARGE,
        provider_key=payment.provider_key,
        payment_id=payment.id,
        amount=payment.amount,
        currency=payment.currency,
        payment_method=payment.payment_method,
        succeeded=True,
    )
    attempt = Attempt.objects.create(provider_key=payment.provider_key, count=1)
    return Records(
        order=order,
        payment=payment,
        operation=Operation.objects.get(result_id=payment.id),
        key=IdempotencyKey.objects.get(key="admin-order"),
        ledger_entry=ledger_entry,
        attempt=attempt,
    )


def changelist(model: type[Model]) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def change_page(obj: Model) -> str:
    opts = obj._meta
    # Quoted as the admin quotes its own links: an id such as pay_23… would
    # otherwise be read back as pay#… (the admin's escape for "#" is "_23"),
    # and one id in 216 (six of the escapes are two digits) would name no record.
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])


def page_text(response: Any) -> str:
    text: str = response.content.decode()
    return text


# --- every changelist -----------------------------------------------------------

CHANGELISTS = [
    (Tenant, lambda r: r.order.tenant.slug),
    (Principal, lambda r: "alice"),
    (ApiToken, lambda r: ApiToken.objects.get().prefix),
    (Product, lambda r: "Demo item ABC"),
    (Order, lambda r: r.order.id),
    (Payment, lambda r: r.payment.id),
    (Operation, lambda r: r.operation.id),
    (IdempotencyKey, lambda r: "admin-order"),
    (LedgerEntry, lambda r: "ch_admin"),
    (Attempt, lambda r: r.attempt.provider_key),
]


@pytest.mark.parametrize(("model", "row"), CHANGELISTS, ids=lambda v: getattr(v, "__name__", ""))
def test_each_changelist_renders_with_its_row(
    admin_client: Client, records: Records, model: type[Model], row: Callable[[Records], str]
) -> None:
    response = admin_client.get(changelist(model))

    assert response.status_code == 200
    assert row(records) in page_text(response)


def test_the_order_changelist_finds_an_order_by_id_and_by_customer(
    admin_client: Client, records: Records
) -> None:
    by_id = admin_client.get(changelist(Order), {"q": records.order.id})
    by_customer = admin_client.get(changelist(Order), {"q": records.order.customer_id})
    by_other = admin_client.get(changelist(Order), {"q": "nobody"})

    assert records.order.id in page_text(by_id)
    assert records.order.id in page_text(by_customer)
    assert records.order.id not in page_text(by_other)


def test_the_simulator_pages_say_whose_records_they_are(
    admin_client: Client, records: Records
) -> None:
    listing = admin_client.get(changelist(LedgerEntry))
    detail = admin_client.get(change_page(records.attempt))

    assert "Payment provider simulator" in page_text(listing)
    assert "Payment provider simulator" in page_text(detail)


# --- read-only records ----------------------------------------------------------

READ_ONLY = [Order, Payment, Operation, IdempotencyKey, LedgerEntry, Attempt]


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m.__name__)
def test_records_cannot_be_added_changed_or_deleted(
    admin_client: Client, records: Records, model: type[Model]
) -> None:
    request = admin_client.get(changelist(model)).wsgi_request
    model_admin = admin.site._registry[model]

    assert model_admin.has_add_permission(request) is False
    assert model_admin.has_change_permission(request) is False
    assert model_admin.has_delete_permission(request) is False


@pytest.mark.parametrize(
    "record",
    ["order", "payment", "operation", "key", "ledger_entry", "attempt"],
)
def test_a_record_page_renders_without_a_save_button_and_refuses_a_post(
    admin_client: Client, records: Records, record: str
) -> None:
    obj = getattr(records, record)
    before = type(obj).objects.filter(pk=obj.pk).values().get()

    page = admin_client.get(change_page(obj))
    post = admin_client.post(change_page(obj), {"status": "failed", "_save": "Save"})

    assert page.status_code == 200
    assert 'name="_save"' not in page_text(page)
    assert post.status_code == 403
    assert type(obj).objects.filter(pk=obj.pk).values().get() == before


@pytest.mark.parametrize(
    "model", [Order, Payment, IdempotencyKey, ApiToken], ids=lambda m: m.__name__
)
def test_records_have_no_add_page(admin_client: Client, model: type[Model]) -> None:
    opts = model._meta

    response = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))

    assert response.status_code == 403


def test_records_have_no_delete_page(admin_client: Client, records: Records) -> None:
    opts = IdempotencyKey._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_delete", args=[records.key.pk])

    response = admin_client.post(url, {"post": "yes"})

    assert response.status_code == 403
    assert IdempotencyKey.objects.filter(pk=records.key.pk).exists()


def test_the_order_page_shows_its_items_and_payments(
    admin_client: Client, records: Records
) -> None:
    response = admin_client.get(change_page(records.order))

    text = page_text(response)
    assert "ABC" in text
    assert records.payment.id in text


def test_the_idempotency_key_page_shows_the_stored_response_as_text(
    admin_client: Client, records: Records
) -> None:
    response = admin_client.get(change_page(records.key))

    assert records.order.id in page_text(response)
    assert "customerId" in page_text(response)


def test_a_long_stored_response_is_cut_on_the_page(admin_client: Client, records: Records) -> None:
    body = b'"' + b"x" * (3 * RESPONSE_BODY_PREVIEW_BYTES) + b'"'
    StoredAnswer.objects.filter(key=records.key).update(body=body)

    response = admin_client.get(change_page(records.key))

    text = page_text(response)
    assert "x" * RESPONSE_BODY_PREVIEW_BYTES not in text
    assert "x" * (RESPONSE_BODY_PREVIEW_BYTES - 1) in text
    assert f"of {len(body)} bytes" in text


# --- the catalog is editable -----------------------------------------------------


def test_a_product_can_be_added_and_repriced(admin_client: Client, catalog: None) -> None:
    page = admin_client.get(reverse("admin:orders_product_change", args=["ABC"]))
    added = admin_client.post(
        reverse("admin:orders_product_add"),
        {"sku": "NEW1", "name": "New", "unit_price": "100", "currency": "RUB"},
    )
    changed = admin_client.post(
        reverse("admin:orders_product_change", args=["NEW1"]),
        {"name": "New", "unit_price": "150", "currency": "RUB"},
    )

    # The editable page has the Save button the record pages must not have.
    assert 'name="_save"' in page_text(page)
    assert added.status_code == 302
    assert changed.status_code == 302
    assert Product.objects.get(pk="NEW1").unit_price == 150


# --- tokens: issued through a principal, shown once, stored as a digest --------


def tokens_on(response: Any) -> list[str]:
    return TOKEN.findall(page_text(response))


def assert_only_the_digest_is_stored(token: str) -> None:
    rows = list(ApiToken.objects.values())
    assert any(row["digest"] == ApiToken.digest_of(token) for row in rows)
    assert all(token not in str(value) for row in rows for value in row.values())


def api_orders(token: str) -> int:
    return Client().get("/v1/orders", headers={"Authorization": f"Bearer {token}"}).status_code


def test_adding_a_principal_shows_its_token_once(admin_client: Client, db: None) -> None:
    tenant = Tenant.objects.create(slug="initech")

    added = admin_client.post(
        reverse("admin:accounts_principal_add"),
        {"tenant": tenant.pk, "name": "ops-bot", "_save": "Save"},
        follow=True,
    )
    principal = Principal.objects.get(tenant=tenant, name="ops-bot")
    again = admin_client.get(changelist(Principal))
    its_page = admin_client.get(change_page(principal))

    assert added.status_code == 200
    [token] = tokens_on(added)
    assert token not in page_text(again)
    assert token not in page_text(its_page)
    assert api_orders(token) == 200
    assert_only_the_digest_is_stored(token)
    assert ApiToken.objects.get().principal == principal


def test_a_principal_that_fails_validation_gets_no_token(admin_client: Client, db: None) -> None:
    tenant = Tenant.objects.create(slug="initech")
    Principal.objects.create(tenant=tenant, name="ops-bot")

    response = admin_client.post(
        reverse("admin:accounts_principal_add"), {"tenant": tenant.pk, "name": "ops-bot"}
    )

    assert response.status_code == 200
    assert tokens_on(response) == []
    assert not ApiToken.objects.exists()


def test_the_issue_token_action_shows_a_new_working_token_once(
    admin_client: Client, api: Api
) -> None:
    response = admin_client.post(
        changelist(Principal),
        {"action": "issue_token", "_selected_action": [api.principal.pk]},
        follow=True,
    )
    again = admin_client.get(changelist(Principal))

    [token] = tokens_on(response)
    assert token != api.token
    assert token not in page_text(again)
    assert api_orders(token) == 200
    assert api_orders(api.token) == 200
    assert_only_the_digest_is_stored(token)
    assert ApiToken.objects.filter(principal=api.principal).count() == 2


def test_revoking_a_token_ends_its_access(admin_client: Client, api: Api) -> None:
    api_token = ApiToken.objects.get(principal=api.principal)

    response = admin_client.post(
        changelist(ApiToken), {"action": "revoke", "_selected_action": [api_token.pk]}
    )

    assert response.status_code == 302
    api_token.refresh_from_db()
    assert api_token.revoked_at is not None
    assert api_orders(api.token) == 401


def test_a_token_page_shows_its_prefix_but_not_its_digest(admin_client: Client, api: Api) -> None:
    api_token = ApiToken.objects.get(principal=api.principal)

    response = admin_client.get(change_page(api_token))

    assert response.status_code == 200
    assert api_token.prefix in page_text(response)
    assert api_token.digest not in page_text(response)
    assert 'name="_save"' not in page_text(response)


def test_webhook_endpoints_are_shown_read_only_and_never_with_their_secret(
    admin_client: Client, api: Api
) -> None:
    created = api.post(
        "/v1/webhook-endpoints",
        {"url": "https://192.0.32.10/hooks", "eventTypes": ["*"]},
        key="subscribe",
    )
    endpoint = body_of(created)

    page = admin_client.get(change_page(WebhookEndpoint.objects.get(pk=endpoint["id"])))

    assert endpoint["url"] in page_text(page)
    assert endpoint["secret"] not in page_text(page)
    for model in (Event, WebhookEndpoint, Delivery):
        model_admin = admin.site._registry[model]
        assert model_admin.has_change_permission(page.wsgi_request) is False
        assert model_admin.has_add_permission(page.wsgi_request) is False
