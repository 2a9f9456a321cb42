"""Delivering an event to a webhook endpoint: one attempt of a ``webhook.deliver`` operation.

The operations app carries deliveries as it carries charges
(operations.services): the operation's message is published after the
event's transaction commits, found again by the sweep when lost, claimed
by compare-and-set, and retried with backoff within a budget
(``WEBHOOK_MAX_ATTEMPTS``, ``WEBHOOK_RETRY_BACKOFF``). This module is one
attempt: sign the event's bytes, post them, record what came back.

Deliveries are **at least once**: an attempt whose answer was lost (a
timeout, a worker killed after the receiver's ``2xx``) is made again, with
the same body and the same ``webhook-id``, and the receiver deduplicates
by that id (order_service_client.webhooks' inbox does). The feed, not the
deliveries, is where exactly once holds.

**One endpoint at a time.** An attempt first takes its endpoint for the
length of one attempt (``WebhookEndpoint.busy_until``, a compare-and-set);
if another attempt holds it, this one is postponed, uncounted, and waits
in the database with no message out. The attempt that holds the endpoint
sends the oldest waiting delivery of it as it lets the endpoint go
(:func:`_release`); should that attempt's worker die, the sweep sends the
waiting ones after ``_WAIT_FOR_RELEASE``. So a receiver that is slow to
answer holds one worker at most, and the others deliver to every other
endpoint meanwhile; the price is that one endpoint takes one delivery at a
time (an endpoint that answers in 50 ms takes some 15 a second).

**A few at a time per tenant.** Holding its endpoint, an attempt then
takes one of its tenant's ``WEBHOOK_TENANT_CONCURRENCY`` slots
(events.tenant_slots). None free, it lets the endpoint go and is held
back (``Delivery.held_at``): postponed, uncounted, like a wait for the
endpoint. As each of the tenant's attempts ends it sends on the tenant's
oldest held delivery, and the delivery waiting for its endpoint, if any,
joins the held ones behind it, so that the tenant's endpoints take turns.
A tenant with more slow receivers than the deliveries workers have slots
holds the bound, never all the slots.

**Bounded in all, and apart.** An attempt takes at most ``WEBHOOK_TIMEOUT``
from connecting to the answer's status, however slowly a receiver sends it
(events.outbound), and attempts run on workers of their own
(``WEBHOOK_QUEUE``): a tenant's slow receivers hold delivery slots, never
the slots payments and refunds need.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

import standardwebhooks
import structlog
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from events import addresses, metrics, outbound, tenant_slots
from events.models import Delivery, WebhookEndpoint
from events.rendering import body_of
from events.services import DELIVER_WEBHOOK
from operations import registry
from operations.errors import Postponed, TransientFailure
from operations.models import Operation
from operations.registry import Failure
from operations.services import (
    fail_operation,
    finish_operation,
    oldest_waiting,
    publish_waiting,
    under_way,
)

logger = structlog.get_logger(__name__)

UNDELIVERED = "WebhookUndelivered"
# The error of a delivery's operation ended by disabling its endpoint: not
# an exhausted budget (operations_attempts_exhausted_total leaves it out).
ENDPOINT_DISABLED = "WebhookEndpointDisabled"
# How much of a receiver's failure is kept: its status code, and our words.
_ERROR_LENGTH = 500
# How long an attempt holds its endpoint, beyond its two bounds: the name's
# resolution (addresses.RESOLVE_TIMEOUT), then the request, WEBHOOK_TIMEOUT
# in all (events.outbound). The hold must outlast the attempt, or a second
# attempt could take the endpoint while the first still waits.
_HOLD_MARGIN = 5.0
# How long a postponed delivery waits at most for the attempt that holds its
# endpoint to send it on (seconds): only if that attempt's worker died. Five
# minutes: the deliveries waiting for one slow endpoint cost one message
# each per five minutes, not a poll of it.
_WAIT_FOR_RELEASE = 300.0


class Undelivered(TransientFailure):
    """The endpoint did not take the event: no 2xx in time, or no answer at all."""


def _backoff() -> float:
    return float(settings.WEBHOOK_RETRY_BACKOFF)


def _budget() -> int:
    return int(settings.WEBHOOK_MAX_ATTEMPTS)


# Doubling from WEBHOOK_RETRY_BACKOFF, up to six hours between two attempts:
# with the defaults (60 s, 8 attempts) the last attempt comes some two hours
# after the first, which rides out a receiver's deploy or outage of that
# length. Retries due in more than a minute wait in the database, not in a
# worker (operations.attempts.LONGEST_COUNTDOWN).
RETRY = registry.RetryPolicy(
    on=(Undelivered,),
    error=UNDELIVERED,
    first_delay=_backoff,
    max_delay=6 * 3600.0,
    budget=_budget,
)


def give_up(operation: Operation, failure: Failure) -> None:
    """The attempts ran out: the delivery ends failed, with its last attempt's outcome.

    Its last attempt may have died holding the endpoint: the hold is let go,
    and the delivery waiting longest for the endpoint sent on.
    """
    with transaction.atomic():
        Delivery.objects.filter(pk=operation.result_id, status=Delivery.Status.PENDING).update(
            status=Delivery.Status.FAILED,
            next_attempt_at=None,
            held_at=None,
            updated_at=timezone.now(),
        )
        fail_operation(operation, failure)
    metrics.count_delivery("failed")
    endpoint_id = (
        Delivery.objects.filter(pk=operation.result_id)
        .values_list("endpoint_id", flat=True)
        .first()
    )
    released_slot = tenant_slots.release(tenant_id=operation.tenant_id, operation_id=operation.pk)
    released_endpoint = endpoint_id is not None and WebhookEndpoint.objects.filter(
        pk=endpoint_id, busy_by=operation.pk
    ).update(busy_until=None, busy_by="")
    if endpoint_id is not None and (released_slot or released_endpoint):
        _send_next(endpoint_id, operation.tenant_id)


def _queue() -> str:
    return str(settings.WEBHOOK_QUEUE)


@registry.register(
    DELIVER_WEBHOOK,
    # The service's own work, not a client's command: no client is given
    # its id, and its endpoint's deliveries tell how it went.
    result_path=None,
    retry=RETRY,
    give_up=give_up,
    # Workers of their own: a receiver that takes its whole timeout to
    # answer, at every endpoint of a tenant, holds only delivery slots.
    queue=_queue,
)
def deliver(operation: Operation) -> None:
    """Post the event to the endpoint, and record the outcome.

    :raises Undelivered: no 2xx; the operation retries after its backoff.
    :raises Postponed: another attempt holds the endpoint, or the tenant
        has ``WEBHOOK_TENANT_CONCURRENCY`` attempts under way.
    """
    delivery = Delivery.objects.select_related("event", "endpoint").get(pk=operation.result_id)
    if delivery.status != Delivery.Status.PENDING:
        # Ended meanwhile: its endpoint was disabled.
        succeeded = delivery.status == Delivery.Status.SUCCEEDED
        finish_operation(
            operation,
            succeeded=succeeded,
            error_code="" if succeeded else ENDPOINT_DISABLED,
            error_message=delivery.last_error,
        )
        return
    endpoint = delivery.endpoint
    hold = _take(endpoint, operation)
    _take_slot(delivery, operation, hold)
    try:
        status_code, error = _post(delivery)
    finally:
        _release(endpoint, hold, operation)
    _record(operation, delivery, status_code, error)


def _take(endpoint: WebhookEndpoint, operation: Operation) -> datetime:
    """Hold the endpoint for one attempt of ``operation``; the hold's end.

    Free, or held past its end, or held by an earlier attempt of the same
    operation (whose worker died in it), it is taken.

    :raises Postponed: another operation's attempt holds it.
    """
    now = timezone.now()
    longest = addresses.RESOLVE_TIMEOUT + settings.WEBHOOK_TIMEOUT + _HOLD_MARGIN
    until = now + timedelta(seconds=longest)
    taken = (
        WebhookEndpoint.objects.filter(pk=endpoint.pk)
        .filter(Q(busy_until__isnull=True) | Q(busy_until__lt=now) | Q(busy_by=operation.pk))
        .update(busy_until=until, busy_by=operation.pk)
    )
    if not taken:
        raise Postponed(_WAIT_FOR_RELEASE, awaiting=_EndpointFree(endpoint.pk))
    return until


@dataclass(frozen=True)
class _EndpointFree:
    """What a delivery postponed behind its endpoint's other delivery waits for."""

    endpoint_id: str

    def came_free(self) -> bool:
        return WebhookEndpoint.objects.filter(pk=self.endpoint_id, busy_until__isnull=True).exists()


@dataclass(frozen=True)
class _TenantSlotFree:
    """What a delivery held back by its tenant's bound on attempts in flight waits for."""

    tenant_id: int

    def came_free(self) -> bool:
        return tenant_slots.has_room(self.tenant_id)


def _take_slot(delivery: Delivery, operation: Operation, hold: datetime) -> None:
    """Take one of the tenant's slots for the attempt, which holds the endpoint until ``hold``.

    :raises Postponed: the tenant has ``WEBHOOK_TENANT_CONCURRENCY``
        attempts under way; the endpoint is let go, and the delivery is
        held back until one of them ends.
    """
    if tenant_slots.take(tenant_id=delivery.tenant_id, operation_id=operation.pk, until=hold):
        if delivery.held_at is not None:
            Delivery.objects.filter(pk=delivery.pk).update(held_at=None)
        return
    # The endpoint's next delivery is not sent on: it would be held back too.
    WebhookEndpoint.objects.filter(pk=delivery.endpoint_id, busy_until=hold).update(
        busy_until=None, busy_by=""
    )
    if delivery.held_at is None:
        Delivery.objects.filter(pk=delivery.pk).update(held_at=timezone.now())
    # The same wait as for an endpoint: every end of one of the tenant's
    # attempts (give_up's included, and the retry of one whose worker died)
    # sends a held delivery on, so the wait is only for a send that was lost.
    # A shorter one would poll every held delivery, a backlog's work
    # multiplied, while the tenant's receivers stay slow.
    raise Postponed(_WAIT_FOR_RELEASE, awaiting=_TenantSlotFree(delivery.tenant_id))


def _release(endpoint: WebhookEndpoint, hold: datetime, operation: Operation) -> None:
    """Let the endpoint and the tenant's slot go, and send the next delivery on."""
    # Only our own holds: if one lapsed and another attempt took it, that
    # one keeps it.
    WebhookEndpoint.objects.filter(pk=endpoint.pk, busy_until=hold).update(
        busy_until=None, busy_by=""
    )
    tenant_slots.release(tenant_id=endpoint.tenant_id, operation_id=operation.pk, until=hold)
    _send_next(endpoint.pk, endpoint.tenant_id)


def _send_next(endpoint_id: str, tenant_id: int) -> None:
    """Publish the tenant's oldest held delivery, or else the endpoint's oldest waiting one.

    A slot of the tenant and the endpoint have come free. Held deliveries
    go first, in the order they were held back; the endpoint's waiting
    delivery, if any, is then held back behind them, so that an endpoint
    with a backlog does not keep the slot from the tenant's other endpoints.
    """
    held = _oldest_held(tenant_id)
    waiting = _waiting_for(endpoint_id, tenant_id)
    if held is None:
        if waiting is not None:
            publish_waiting(waiting.pk)
        return
    if waiting is not None:
        Delivery.objects.filter(pk=waiting.result_id, held_at__isnull=True).update(
            held_at=timezone.now()
        )
    publish_waiting(held)


def _oldest_held(tenant_id: int) -> str | None:
    """The operation of the tenant's delivery held back longest whose endpoint is free."""
    now = timezone.now()
    delivery_id = (
        Delivery.objects.filter(
            tenant=tenant_id, status=Delivery.Status.PENDING, held_at__isnull=False
        )
        .filter(Q(endpoint__busy_until__isnull=True) | Q(endpoint__busy_until__lt=now))
        .order_by("held_at")
        .values_list("pk", flat=True)
        .first()
    )
    if delivery_id is None:
        return None
    operation = under_way(tenant_id=tenant_id, kind=DELIVER_WEBHOOK, result_id=delivery_id)
    return None if operation is None else operation.pk


def _waiting_for(endpoint_id: str, tenant_id: int) -> Operation | None:
    """The operation of the endpoint's postponed delivery that has waited longest, if any."""
    now = timezone.now()
    # Postponed deliveries: pending, with no backoff still to wait out.
    due = Delivery.objects.filter(endpoint=endpoint_id, status=Delivery.Status.PENDING).filter(
        Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    )
    return oldest_waiting(tenant_id=tenant_id, kind=DELIVER_WEBHOOK, result_ids=due.values("id"))


def _post(delivery: Delivery) -> tuple[int | None, str]:
    """One signed POST of the event; the status code, or None and why there was none.

    The attempt takes at most ``WEBHOOK_TIMEOUT`` from connecting to the
    answer's status, however slowly the receiver sends it
    (events.outbound). What went wrong is said for the tenant; the
    network's own account goes to the log.
    """
    try:
        target = addresses.resolve(delivery.endpoint.url, tenant=delivery.endpoint.tenant_id)
    except addresses.Refused as refused:
        return None, f"Not delivered: {refused}"
    body = body_of(delivery.event)
    now = timezone.now()
    headers = {
        "content-type": "application/json",
        "user-agent": "order-service-webhooks",
        "host": target.host_header(),
        "webhook-id": delivery.event.id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": standardwebhooks.Webhook(delivery.endpoint.secret).sign(
            msg_id=delivery.event.id, timestamp=now, data=body.decode()
        ),
    }
    try:
        status_code = outbound.post(
            target.address_url(),
            content=body,
            headers=headers,
            timeout=settings.WEBHOOK_TIMEOUT,
            sni_hostname=target.host,
        )
    except outbound.Unanswered as unanswered:
        logger.info(
            "webhook attempt unanswered",
            endpoint_id=delivery.endpoint_id,
            reason=str(unanswered),
            detail=unanswered.detail,
        )
        return None, str(unanswered)
    return status_code, ""


def _record(operation: Operation, delivery: Delivery, status_code: int | None, error: str) -> None:
    """What the attempt got, on the delivery; the operation ends if the endpoint took the event.

    :raises Undelivered: it did not; the next attempt follows the backoff.
    """
    now = timezone.now()
    delivered = status_code is not None and 200 <= status_code < 300
    if not delivered and not error:
        error = f"The endpoint answered {status_code}."
    last = operation.attempts >= RETRY.budget()
    next_attempt_at = (
        None if delivered or last else now + timedelta(seconds=RETRY.delay(operation.attempts))
    )
    with transaction.atomic():
        updated = Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.PENDING).update(
            status=Delivery.Status.SUCCEEDED if delivered else Delivery.Status.PENDING,
            attempts=operation.attempts,
            last_status_code=status_code,
            last_error=error[:_ERROR_LENGTH],
            next_attempt_at=next_attempt_at,
            updated_at=now,
        )
        if delivered and updated:
            finish_operation(operation, succeeded=True)
    metrics.count_attempt(status_code)
    if delivered:
        metrics.count_delivery("succeeded")
        return
    if not updated:
        # Disabled meanwhile: nothing more is delivered.
        finish_operation(
            operation,
            succeeded=False,
            error_code=ENDPOINT_DISABLED,
            error_message=error[:_ERROR_LENGTH],
        )
        return
    raise Undelivered(error)
