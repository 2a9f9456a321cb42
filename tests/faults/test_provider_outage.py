"""A provider that nobody can reach, and the operator who ends what it left processing.

While the provider is unreachable (``manage.py provider_outage``), a charge
runs out of attempts and cannot be called failed: the look-up that would
say nothing was charged times out too. The payment waits (decision 0010),
``/metrics`` counts it, and the operator ends it with ``manage.py
operations settle``, as deployed: gunicorn and a Celery worker with beat.
"""

import re
import time
import uuid

import pytest
import requests

from events.models import Event
from orders.models import Order, Payment
from provider.models import LedgerEntry
from tests.faults.harness import REPORT, Deployment, Figures, RetryingClient
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

FAST_ATTEMPTS = {"OPERATION_MAX_ATTEMPTS": "2", "PAYMENT_RETRY_BACKOFF": "0.2"}


def unsettled(base_url: str) -> int:
    """``operations_unsettled{kind="payment.charge"}`` as a web node reports it."""
    text = requests.get(f"{base_url}/metrics", timeout=10).text
    found = re.search(r'^operations_unsettled\{kind="payment\.charge"\} (\S+)$', text, re.M)
    assert found, "no operations_unsettled series for payment.charge"
    return int(float(found.group(1)))


def test_an_operator_settles_the_payments_a_silent_provider_left_processing(
    deployment: Deployment, token: str
) -> None:
    deployment.env = {**deployment.env, **FAST_ATTEMPTS}
    deployment.start_web()
    deployment.start_worker()
    base_url = deployment.service.base_url
    client = RetryingClient(base_url, token, Figures("provider outage"))
    assert deployment.manage("provider_outage", "start").returncode == 0
    orders = [client.place_order() for _ in range(2)]
    started = time.monotonic()
    told, asked = (client.pay(order) for order in orders)

    wait_for(lambda: unsettled(base_url), lambda n: n == 2, 30, what="both payments unsettled")
    out_of_attempts_s = time.monotonic() - started
    still_silent = deployment.manage("operations", "settle", told["operationId"])
    by_word = deployment.manage("operations", "settle", told["operationId"], "--outcome", "failed")
    assert deployment.manage("provider_outage", "end").returncode == 0
    by_look_up = deployment.manage("operations", "settle", asked["operationId"])

    assert still_silent.returncode == 1, still_silent.stdout
    assert "The provider still cannot say: timed out" in still_silent.stderr
    assert by_word.returncode == 0, by_word.stderr
    assert by_look_up.returncode == 0, by_look_up.stderr
    for settled in (by_word, by_look_up):
        assert "payment.charge ended failed (ProviderUnavailable" in settled.stdout
    # What the customers see: failed, nothing charged, the orders payable again.
    for accepted in (told, asked):
        payment = requests.get(
            f"{base_url}/v1/payments/{accepted['paymentId']}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        ).json()
        assert (payment["status"], payment["failureCode"]) == ("failed", "provider_unavailable")
    assert set(Order.objects.values_list("status", flat=True)) == {Order.Status.PENDING}
    assert not LedgerEntry.objects.exists()
    assert Event.objects.filter(type="payment.failed").count() == 2
    assert unsettled(base_url) == 0
    again = client.command(
        "POST",
        "/v1/payments",
        {
            "orderId": orders[0]["id"],
            "amount": orders[0]["totalAmount"],
            "currency": orders[0]["currency"],
            "paymentMethod": "pm_card_ok",
        },
        key=f"pay-again-{uuid.uuid4().hex}",
    )
    assert again.status_code == 202, again.text
    wait_for(
        lambda: Payment.objects.filter(status=Payment.Status.SUCCEEDED).count(),
        lambda n: n == 1,
        30,
        what="the order paid again once the provider is back",
    )
    assert LedgerEntry.objects.count() == 1
    REPORT.append(
        f"provider outage: 2 payments out of attempts and unsettled {out_of_attempts_s:.1f} s"
        " after their 202s; one settled on the operator's word, one by asking the provider"
        " once it was back: both failed, nothing charged, the order paid again after"
    )
