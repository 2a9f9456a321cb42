"""The asynchronous work of payments: the operation kinds that charge and refund, and how each ends.

A command records an operation instead of calling the provider
(orders.services); a worker performs it here (:func:`charge_payment`,
:func:`refund_order`), calling the provider outside any transaction and
recording the outcome in one, after a compare-and-set that finds it not
recorded yet. When its attempts run out, the kind's give-up asks the
provider what it holds under the operation's key before anything is
called failed (:func:`settle_charge`, :func:`settle_refund`; decision
0010), and an operator may end it on what they learned elsewhere
(:func:`settle_charge_as`, :func:`settle_refund_as`).

Every writer of an order or its payments takes the order's row lock first
(:func:`orders.locks.lock_order`), so that they take turns in one order and
never deadlock.
"""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from operations import registry
from operations.models import Operation
from operations.registry import Failure
from operations.services import finish_operation
from orders import domain_events
from orders.links import order_path, payment_path
from orders.locks import lock_order
from orders.models import Order, Payment
from provider.configured import get_gateway
from provider.gateway import ProviderResult, ProviderUnavailable

CHARGE_PAYMENT = "payment.charge"
REFUND_ORDER = "order.refund"


# The error a charge or refund ends with when the provider kept refusing it.
PROVIDER_UNAVAILABLE = "ProviderUnavailable"


def _payment_retry_backoff() -> float:
    return float(settings.PAYMENT_RETRY_BACKOFF)


# A provider call whose outcome is unknown is retried with the same provider
# key, after PAYMENT_RETRY_BACKOFF seconds, doubling each time up to a
# minute, until OPERATION_MAX_ATTEMPTS attempts have been made.
_PROVIDER_RETRY = registry.RetryPolicy(
    on=(ProviderUnavailable,), error=PROVIDER_UNAVAILABLE, first_delay=_payment_retry_backoff
)


def settle_charge(operation: Operation, failure: Failure) -> None:
    """End a charge whose attempts have run out, as the provider says it ended.

    An attempt that timed out may have charged, so the provider is asked
    what it holds under the payment's key before the payment is called
    failed. A charge it holds is the payment's outcome, as if the last
    attempt had received its answer; if it holds none, nothing was charged,
    the payment fails with ``failure``, and the order can be paid again.

    :raises ProviderUnavailable: the provider could not say; it is asked again later.
    """
    payment = Payment.objects.get(pk=operation.result_id)
    _end_charge(
        operation, payment, get_gateway().look_up(provider_key=payment.provider_key), failure
    )


def settle_charge_as(operation: Operation, failure: Failure, verdict: registry.Verdict) -> None:
    """End a charge as an operator learned it ended, from the provider but not by its look-up.

    ``operations settle --outcome``: succeeded is a charge the provider
    holds (``verdict.reference`` its id), failed is none, exactly as if the
    look-up had answered so.
    """
    payment = Payment.objects.get(pk=operation.result_id)
    held = (
        ProviderResult(charge_id=verdict.reference, succeeded=True) if verdict.succeeded else None
    )
    _end_charge(operation, payment, held, failure)


def _end_charge(
    operation: Operation, payment: Payment, held: ProviderResult | None, failure: Failure
) -> None:
    if held is not None:
        _record_charge(operation, payment, held)
        return
    if failure.code == PROVIDER_UNAVAILABLE:
        failure_code, why = "provider_unavailable", "The payment provider kept refusing the charge"
    else:
        failure_code, why = "processing_error", "The payment failed on our side"
    _record_charge(
        operation,
        payment,
        ProviderResult(charge_id="", succeeded=False, failure_code=failure_code),
        error=Failure(
            failure.code, f"{why}, and nothing was charged: the order can be paid again."
        ),
    )


@registry.register(
    CHARGE_PAYMENT,
    result_path=payment_path,
    retry=_PROVIDER_RETRY,
    give_up=settle_charge,
    settle=settle_charge_as,
)
def charge_payment(operation: Operation) -> None:
    """Charge the operation's payment and record the outcome.

    :raises ProviderUnavailable: the outcome is unknown; retry.
    """
    payment = Payment.objects.get(pk=operation.result_id)
    result = get_gateway().charge(
        provider_key=payment.provider_key,
        payment_id=payment.id,
        amount=payment.amount,
        currency=payment.currency,
        payment_method=payment.payment_method,
    )
    _record_charge(operation, payment, result)


def _record_charge(
    operation: Operation, payment: Payment, result: ProviderResult, *, error: Failure | None = None
) -> None:
    """The outcome of a charge: the operation, the payment and the order, together.

    ``error`` is the operation's error when the charge failed other than by
    the provider's refusal (its attempts ran out).
    """
    now = timezone.now()
    with transaction.atomic():
        lock_order(internal_id=payment.order_id)
        if not _finish(operation, result, declined="PaymentDeclined", what="payment", error=error):
            return  # another attempt recorded the outcome first
        ended = Payment.objects.filter(pk=payment.pk, status=Payment.Status.PROCESSING).update(
            status=Payment.Status.SUCCEEDED if result.succeeded else Payment.Status.FAILED,
            failure_code=result.failure_code,
            provider_charge_id=result.charge_id,
            updated_at=now,
        )
        if result.succeeded:
            Order.objects.filter(pk=payment.order_id, status=Order.Status.PENDING).update(
                status=Order.Status.PAID, updated_at=now
            )
        if ended:
            domain_events.payment_event(
                domain_events.PAYMENT_SUCCEEDED
                if result.succeeded
                else domain_events.PAYMENT_FAILED,
                payment.pk,
            )


def settle_refund(operation: Operation, failure: Failure) -> None:
    """End a refund whose attempts have run out, as the provider says it ended.

    As for a charge (:func:`settle_charge`): a refund the provider holds is
    the outcome; if it holds none, the refund fails, the order stays paid,
    and cancelling it again asks for a new refund.

    :raises ProviderUnavailable: the provider could not say; it is asked again later.
    """
    payment = _paid(operation)
    _end_refund(
        operation, payment, get_gateway().look_up(provider_key=_refund_key(operation)), failure
    )


def settle_refund_as(operation: Operation, failure: Failure, verdict: registry.Verdict) -> None:
    """End a refund as an operator learned it ended (as :func:`settle_charge_as` a charge)."""
    payment = _paid(operation)
    held = (
        ProviderResult(charge_id=verdict.reference, succeeded=True) if verdict.succeeded else None
    )
    _end_refund(operation, payment, held, failure)


def _end_refund(
    operation: Operation, payment: Payment, held: ProviderResult | None, failure: Failure
) -> None:
    if held is not None:
        _record_refund(operation, payment, held)
        return
    _record_refund(
        operation,
        payment,
        ProviderResult(charge_id="", succeeded=False),
        error=Failure(
            failure.code,
            "The refund could not be made, and the provider holds none: the order is "
            "still paid, and cancelling it again asks for a new refund.",
        ),
    )


@registry.register(
    REFUND_ORDER,
    result_path=order_path,
    retry=_PROVIDER_RETRY,
    give_up=settle_refund,
    settle=settle_refund_as,
)
def refund_order(operation: Operation) -> None:
    """Refund the order's payment, then mark it refunded and the order cancelled.

    :raises ProviderUnavailable: the outcome is unknown; retry.
    """
    payment = _paid(operation)
    result = get_gateway().refund(
        provider_key=_refund_key(operation),
        payment_id=payment.id,
        amount=payment.amount,
        currency=payment.currency,
    )
    _record_refund(operation, payment, result)


def _paid(refund: Operation) -> Payment:
    """The payment a refund operation gives back."""
    return Payment.objects.get(
        order__tenant=refund.tenant_id,
        order__id=refund.result_id,
        status=Payment.Status.SUCCEEDED,
    )


def _refund_key(refund: Operation) -> str:
    # Derived from the refund operation: its retries and redeliveries are
    # one refund, and a new refund after a declined one is a new call.
    return f"refund-{refund.id}"


def _record_refund(
    operation: Operation, payment: Payment, result: ProviderResult, *, error: Failure | None = None
) -> None:
    """The outcome of a refund: the operation, the payment and the order, together.

    ``error`` is the operation's error when the refund failed other than by
    the provider's refusal (its attempts ran out).
    """
    now = timezone.now()
    with transaction.atomic():
        lock_order(internal_id=payment.order_id)
        if not _finish(operation, result, declined="RefundDeclined", what="refund", error=error):
            return  # another attempt recorded the outcome first
        if not result.succeeded:
            return  # the order stays paid; cancelling again starts a new refund
        Payment.objects.filter(pk=payment.pk).update(status=Payment.Status.REFUNDED, updated_at=now)
        Order.objects.filter(pk=payment.order_id).update(
            status=Order.Status.CANCELLED, updated_at=now
        )
        domain_events.payment_event(domain_events.PAYMENT_REFUNDED, payment.pk)
        domain_events.order_event_by_key(domain_events.ORDER_CANCELLED, payment.order_id)


def _finish(
    operation: Operation,
    result: ProviderResult,
    *,
    declined: str,
    what: str,
    error: Failure | None = None,
) -> bool:
    """Record the outcome on the operation; False if it was finished already.

    A failure is the provider's refusal (``declined``) unless ``error`` says otherwise.
    """
    if result.succeeded:
        return finish_operation(operation, succeeded=True)
    error = error or Failure(declined, f"The provider declined the {what} ({result.failure_code}).")
    return finish_operation(
        operation, succeeded=False, error_code=error.code, error_message=error.message
    )
