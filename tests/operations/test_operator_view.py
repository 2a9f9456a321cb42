"""What an operator sees of the asynchronous side: ``manage.py operations`` and ``/metrics``."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from pytest_django import Settings

from accounts.models import Tenant
from operations.models import Operation

pytestmark = pytest.mark.django_db


def operation(tenant: Tenant, kind: str, status: str, **fields: object) -> Operation:
    return Operation.objects.create(
        tenant=tenant, kind=kind, status=status, result_id=f"r{Operation.objects.count()}", **fields
    )


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="ops")


def test_the_command_shows_counts_ages_budgets_and_copies(
    tenant: Tenant, settings: Settings
) -> None:
    settings.OPERATION_MAX_ATTEMPTS = 10
    for _ in range(3):
        operation(tenant, "payment.charge", "succeeded", attempts=1, publications=1)
    operation(tenant, "payment.charge", "failed", attempts=10, publications=12)
    stuck = operation(
        tenant,
        "payment.charge",
        "processing",
        attempts=7,
        publications=8,
        error_code="ProviderUnavailable",
        error_message="503 Service Unavailable",
    )
    Operation.objects.filter(pk=stuck.pk).update(
        created_at=timezone.now() - timedelta(minutes=4, seconds=12)
    )
    out = io.StringIO()

    call_command("operations", stdout=out)

    text = out.getvalue()
    lines = text.splitlines()
    assert "  payment.charge   failed              1        10        11" in lines
    assert "  payment.charge   processing          1         7         7" in lines
    assert "  payment.charge   succeeded           3         3         0" in lines
    assert "  5 operations, 23 messages published: 4.60 per operation" in lines
    assert f"  payment.charge   {stuck.id}  4m12s old, attempt 7 of 10" in lines
    assert "  order.refund     none" in lines
    (listed,) = [line for line in lines if line.startswith(f"  {stuck.id}  ")]
    assert "attempts 7/10" in listed
    assert "copies 7" in listed
    assert "last failure: ProviderUnavailable: 503 Service Unavailable" in listed


def test_the_command_on_an_empty_table(db: None) -> None:
    out = io.StringIO()

    call_command("operations", stdout=out)

    assert "  0 operations, 0 messages published: - per operation" in out.getvalue()
    assert out.getvalue().rstrip().endswith("none")


def test_metrics_show_how_long_the_oldest_processing_operation_has_waited(
    tenant: Tenant,
) -> None:
    old = operation(tenant, "payment.charge", "processing")
    operation(tenant, "payment.charge", "processing")
    operation(tenant, "order.refund", "succeeded")
    Operation.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(minutes=5))

    scrape = Client().get("/metrics").content.decode()

    ages = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in scrape.splitlines()
        if line.startswith("operations_oldest_processing_age_seconds{")
    }
    assert ages.keys() == {
        'kind="payment.charge"',
        'kind="order.refund"',
        'kind="webhook.deliver"',
    }
    assert 300 <= ages['kind="payment.charge"'] < 310
    assert ages['kind="order.refund"'] == ages['kind="webhook.deliver"'] == 0
