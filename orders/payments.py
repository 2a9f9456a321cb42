"""Payment commands and the asynchronous work that charges and refunds.

The command (:func:`start_payment`) validates and records the payment and
its operation in one transaction; a worker later performs the operation
(:func:`charge_payment`) by calling the provider outside any transaction
and then recording the outcome in one.
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Tenant
from config.exceptions import ApplicationError
from operations.models import Operation
from operations.registry import performs
from operations.services import finish_operation, start_operation
from orders.errors import CurrencyMismatch, OrderStateConflict
from orders.gateway import ProviderResult, get_gateway
from orders.models import Order, Payment


class OrderNotFound(ApplicationError):
    status_code = 422
    code = "OrderNotFound"
    title = "Order not found"
    default_message = "The orderId does not name an order of yours."


class AmountMismatch(ApplicationError):
    status_code = 422
    code = "AmountMismatch"
    title = "Amount mismatch"
    default_message = "The amount must equal the order's total."


class OrderAlreadyPaid(ApplicationError):
    status_code = 409
    code = "OrderAlreadyPaid"
    title = "Order already paid"
    default_message = "The order is paid already."


class PaymentInProgress(ApplicationError):
    status_code = 409
    code = "PaymentInProgress"
    title = "Payment in progress"
    default_message = "Another payment of this order is processing."


@dataclass(frozen=True)
class NewPayment:
    order_id: str
    amount: int
    currency: str
    payment_method: str


def start_payment(*, tenant: Tenant, new_payment: NewPayment) -> tuple[Payment, Operation]:
    """Record a payment and the operation that will charge it.

    :raises OrderNotFound: no such order in this tenant.
    :raises OrderStateConflict: the order is cancelled.
    :raises OrderAlreadyPaid: the order is paid.
    :raises PaymentInProgress: another payment of the order is processing.
    :raises CurrencyMismatch: the currency is not the order's.
    :raises AmountMismatch: the amount is not the order's total.
    """
    with transaction.atomic():
        # Locked: payments and cancels of one order take turns.
        order = (
            Order.objects.select_for_update().filter(tenant=tenant, pk=new_payment.order_id).first()
        )
        if order is None:
            raise OrderNotFound(details={"orderId": new_payment.order_id})
        if order.status == Order.Status.CANCELLED:
            raise OrderStateConflict("A cancelled order cannot be paid.")
        if order.status == Order.Status.PAID:
            raise OrderAlreadyPaid()
        if new_payment.currency != order.currency:
            raise CurrencyMismatch(
                f"The order is in {order.currency}.", details={"currency": order.currency}
            )
        if new_payment.amount != order.total_amount:
            raise AmountMismatch(details={"totalAmount": order.total_amount})
        try:
            with transaction.atomic():
                payment = Payment.objects.create(
                    tenant=tenant,
                    order=order,
                    amount=new_payment.amount,
                    currency=new_payment.currency,
                    payment_method=new_payment.payment_method,
                )
        except IntegrityError:
            # payment_one_live_per_order: a payment of this order is processing.
            raise PaymentInProgress() from None
        operation = start_operation(
            tenant=tenant, kind=Operation.Kind.PAYMENT_CHARGE, result_id=payment.id
        )
    return payment, operation


@performs(Operation.Kind.PAYMENT_CHARGE)
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
    now = timezone.now()
    with transaction.atomic():
        _lock_order(payment.order_id)
        if not _finish(operation, result, declined="PaymentDeclined", what="payment"):
            return  # another attempt recorded the outcome first
        Payment.objects.filter(pk=payment.pk, status=Payment.Status.PROCESSING).update(
            status=Payment.Status.SUCCEEDED if result.succeeded else Payment.Status.FAILED,
            failure_code=result.failure_code,
            provider_charge_id=result.charge_id,
            updated_at=now,
        )
        if result.succeeded:
            Order.objects.filter(pk=payment.order_id, status=Order.Status.PENDING).update(
                status=Order.Status.PAID, updated_at=now
            )


def start_refund(*, order: Order) -> Operation:
    """The refund of a paid order: the one under way, or a new one.

    The caller holds the order's row lock.
    """
    under_way = Operation.objects.filter(
        kind=Operation.Kind.ORDER_REFUND, result_id=order.id, status=Operation.Status.PROCESSING
    ).first()
    return under_way or start_operation(
        tenant=order.tenant, kind=Operation.Kind.ORDER_REFUND, result_id=order.id
    )


@performs(Operation.Kind.ORDER_REFUND)
def refund_order(operation: Operation) -> None:
    """Refund the order's payment, then mark it refunded and the order cancelled.

    :raises ProviderUnavailable: the outcome is unknown; retry.
    """
    payment = Payment.objects.get(order_id=operation.result_id, status=Payment.Status.SUCCEEDED)
    result = get_gateway().refund(
        # Derived from the refund operation: its retries and redeliveries are
        # one refund, and a new refund after a declined one is a new call.
        provider_key=f"refund-{operation.id}",
        payment_id=payment.id,
        amount=payment.amount,
        currency=payment.currency,
    )
    now = timezone.now()
    with transaction.atomic():
        _lock_order(payment.order_id)
        if not _finish(operation, result, declined="RefundDeclined", what="refund"):
            return  # another attempt recorded the outcome first
        if not result.succeeded:
            return  # the order stays paid; cancelling again starts a new refund
        Payment.objects.filter(pk=payment.pk).update(status=Payment.Status.REFUNDED, updated_at=now)
        Order.objects.filter(pk=payment.order_id).update(
            status=Order.Status.CANCELLED, updated_at=now
        )


def _finish(operation: Operation, result: ProviderResult, *, declined: str, what: str) -> bool:
    """Record the provider's answer on the operation; False if it was finished already."""
    if result.succeeded:
        return finish_operation(operation, succeeded=True)
    return finish_operation(
        operation,
        succeeded=False,
        error_code=declined,
        error_message=f"The provider declined the {what} ({result.failure_code}).",
    )


def _lock_order(order_id: str) -> None:
    """Take the order's row lock first, as the commands do.

    A command holding the order's lock may be inserting a payment, which
    waits on this payment's row in payment_one_live_per_order; were the
    payment updated before the order is locked, each would wait for the
    other (a deadlock, and a 500 for the command).
    """
    Order.objects.select_for_update().filter(pk=order_id).values_list("pk", flat=True).first()
