"""Recording events, and the webhook endpoints they are delivered to.

:func:`record_event` is called by the service or handler that makes an
effect, inside its transaction: the event, and a delivery to each endpoint
subscribed to its type, commit with the effect or not at all. A command
that is replayed runs no service, a task that is redelivered finds the
effect made (every handler's write is a compare-and-set), and a database
that fails rolls the event back with the effect: so an effect has one
event, whatever is retried (docs/SPECIFICATION.md §4 rule 11).
"""

import base64
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Expression, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Tenant
from api.plain_reads import Selected
from api.plain_writes import PlainInsert
from events import addresses, registry
from events.errors import (
    InvalidWebhookEndpoint,
    NoSuchWebhookEndpoint,
    TooManyWebhookEndpoints,
    WebhookHostUnresolved,
)
from events.models import Delivery, Event, WebhookEndpoint, transaction_id
from operations.services import start_operations

DELIVER_WEBHOOK = "webhook.deliver"


def _txid(db: BaseDatabaseWrapper) -> Expression:
    """The transaction that writes an event (Event.txid).

    PostgreSQL's own id for it (xid8, 64 bits: it never wraps). SQLite lets
    one writer in at a time, so a counter is as good.
    """
    if db.vendor == "postgresql":
        return transaction_id(function="pg_current_xact_id")
    newest = Event.objects.order_by("-txid").values("txid")[:1]
    return Coalesce(Subquery(newest), 0) + 1


# Every effect records an event: as plain SQL written once (api/plain_writes.py).
_EVENTS = PlainInsert(Event, computed={"txid": _txid})
# And reads the tenant's enabled endpoints, most often none:
# ``WebhookEndpoint.objects.filter(…).only("id", "event_types")`` as a plain
# SELECT written once (api/plain_reads.py).
_ENDPOINTS = Selected.of(WebhookEndpoint, "e", "id", "event_types")


def record_event(
    *, tenant: Tenant, event_type: str, resource: str, data: Mapping[str, Any]
) -> Event:
    """Record that ``event_type`` happened to ``resource``; deliver it to the endpoints subscribed.

    Call it in the effect's transaction. Two queries, and two more when an
    endpoint receives the event (the deliveries, and their operations).

    :raises IntegrityError: the effect has its event already (a bug: the
        caller's compare-and-set should have found the effect made).
    """
    registry.require(event_type)
    with transaction.atomic(savepoint=False):
        event = Event(tenant=tenant, type=event_type, resource=resource, data=data)
        _EVENTS.insert(event)
        receivers = [
            endpoint
            for endpoint in _ENDPOINTS.where(
                tenant=tenant.pk, status=WebhookEndpoint.Status.ENABLED
            )
            if endpoint.receives(event_type)
        ]
        if receivers:
            deliveries = Delivery.objects.bulk_create(
                Delivery(tenant=tenant, event=event, endpoint=endpoint) for endpoint in receivers
            )
            start_operations(
                tenant=tenant,
                kind=DELIVER_WEBHOOK,
                result_ids=[delivery.id for delivery in deliveries],
            )
    return event


# --- Webhook endpoints -------------------------------------------------------


@dataclass(frozen=True)
class NewEndpoint:
    url: str
    event_types: Sequence[str]


def create_endpoint(*, tenant: Tenant, new_endpoint: NewEndpoint) -> WebhookEndpoint:
    """Make a webhook endpoint with a new secret.

    :raises InvalidWebhookEndpoint: the URL is not one the service calls
        (events.addresses).
    :raises WebhookHostUnresolved: its host did not resolve in time, or the
        tenant's lookups still running are at their bound: not stored, a
        retry resolves it again.
    :raises TooManyWebhookEndpoints: the tenant has
        ``WEBHOOK_ENDPOINTS_PER_TENANT`` enabled endpoints already.
    """
    try:
        addresses.resolve(new_endpoint.url, tenant=tenant.pk)
    except addresses.Unresolved as unresolved:
        raise WebhookHostUnresolved(
            f"{unresolved} Retry after the number of seconds in Retry-After.",
            retry_after=unresolved.retry_after,
        ) from None
    except addresses.Refused as refused:
        raise InvalidWebhookEndpoint(details={"url": [str(refused)]}) from None
    limit = settings.WEBHOOK_ENDPOINTS_PER_TENANT
    with transaction.atomic(savepoint=False):
        # The tenant's row lock: two creates at once cannot both pass the count.
        list(Tenant.objects.select_for_update().filter(pk=tenant.pk).values_list("pk"))
        enabled = WebhookEndpoint.objects.filter(
            tenant=tenant, status=WebhookEndpoint.Status.ENABLED
        ).count()
        if enabled >= limit:
            raise TooManyWebhookEndpoints(
                f"A tenant has at most {limit} enabled webhook endpoints: disable one first."
            )
        return WebhookEndpoint.objects.create(
            tenant=tenant,
            url=new_endpoint.url,
            event_types=list(dict.fromkeys(new_endpoint.event_types)),
            secret=new_secret(),
        )


def new_secret() -> str:
    """``whsec_`` and the base64 of 32 random bytes, as Standard Webhooks spells a secret."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


# The last error of a delivery ended by disabling its endpoint, for people;
# its operation ends with the code events.delivery.ENDPOINT_DISABLED.
DISABLED_BEFORE_DELIVERY = "The endpoint was disabled before the event was delivered."


def disable_endpoint(*, tenant: Tenant, endpoint_id: str) -> WebhookEndpoint:
    """Deliver nothing more to the endpoint; its pending deliveries end failed.

    Disabling a disabled endpoint changes nothing.

    :raises NoSuchWebhookEndpoint: no such endpoint in this tenant.
    """
    with transaction.atomic(savepoint=False):
        endpoint = (
            WebhookEndpoint.objects.select_for_update()
            .filter(tenant=tenant, pk=endpoint_id)
            .first()
        )
        if endpoint is None:
            raise NoSuchWebhookEndpoint(f"No webhook endpoint {endpoint_id}.")
        if endpoint.status == WebhookEndpoint.Status.DISABLED:
            return endpoint
        endpoint.status = WebhookEndpoint.Status.DISABLED
        endpoint.save(update_fields=["status", "updated_at"])
        # Their operations find them ended, and end too (events.delivery).
        Delivery.objects.filter(endpoint=endpoint, status=Delivery.Status.PENDING).update(
            status=Delivery.Status.FAILED,
            last_error=DISABLED_BEFORE_DELIVERY,
            next_attempt_at=None,
            updated_at=timezone.now(),
        )
    return endpoint
