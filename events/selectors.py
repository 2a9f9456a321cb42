"""Event and webhook reads, scoped to the caller's tenant but for the operator's feed lag."""

from datetime import datetime

from django.db import connection
from django.db.models import Expression, Func, Q, QuerySet

from accounts.models import Tenant
from api.pagination import InvalidListQuery
from events import registry
from events.errors import NoSuchEvent, NoSuchWebhookEndpoint
from events.models import Delivery, Event, WebhookEndpoint, transaction_id


def _ended_before() -> Expression:
    """Every transaction older than this one has ended: the xmin of the statement's snapshot."""
    return transaction_id(Func(function="pg_current_snapshot"), function="pg_snapshot_xmin")


def _own() -> Expression:
    """The reading transaction's, if it has written (a test's, or a command's that has)."""
    return transaction_id(function="pg_current_xact_id_if_assigned")


def feed_of(
    *, tenant: Tenant, type: str | None = None, after: str | None = None
) -> QuerySet[Event]:
    """The tenant's events a consumer may read, oldest first (by their transactions).

    A consumer reads the feed as a log: it remembers the last event it
    handled and asks for what came ``after`` it. That is only safe if no
    event ever appears before one already read. Events are written by
    concurrent transactions, and a transaction that started first may
    commit last: ordered by when they were written, an event could appear
    behind one a consumer has already passed, and be skipped for good. So
    the feed is ordered by the writing transaction's id, and shows an event
    only once every transaction older than its own has ended (PostgreSQL's
    snapshot ``xmin``): by then no other event can appear before it. The
    price is a lag behind the oldest transaction still running that has
    written anything, on the whole PostgreSQL server (transaction ids are
    the server's, not one database's): milliseconds for the service's own
    commands, and ``IDEMPOTENCY_LOCK_TIMEOUT`` for one that hangs
    (docs/SPECIFICATION.md §3 rule 9). On SQLite writers take turns, and the
    order of insertion is the order of commit.

    :raises InvalidListQuery: ``type`` is not an event type, or ``after``
        names no event of the tenant (or one purged since).
    """
    events = Event.objects.filter(tenant=tenant)
    if connection.vendor == "postgresql":
        events = events.filter(Q(txid__lt=_ended_before()) | Q(txid=_own()))
    if type is not None:
        if type not in registry.types():
            raise InvalidListQuery(
                details={"type": [f"Must be one of: {', '.join(registry.types())}."]}
            )
        events = events.filter(type=type)
    if after is not None:
        position = Event.objects.filter(tenant=tenant, id=after).values_list("txid", "seq").first()
        if position is None:
            raise InvalidListQuery(
                details={
                    "after": [
                        "Names no event of yours: events are kept 30 days or more; "
                        "read from the start, or from a cursor."
                    ]
                }
            )
        txid, seq = position
        events = events.filter(Q(txid__gt=txid) | Q(txid=txid, seq__gt=seq))
    return events


def first_unshown_event_at() -> datetime | None:
    """When the first committed event the feed does not show yet was written; None if none is.

    Across tenants: the horizon is the server's (:func:`feed_of`). "First"
    in the feed's order, by transaction: the event the feed will show next.
    One probe of the ``event_horizon`` index, whatever the table holds.
    Always None on SQLite, whose feed shows each event at its commit.
    """
    if connection.vendor != "postgresql":
        return None
    return (
        Event.objects.filter(txid__gte=_ended_before())
        .order_by("txid", "seq")
        .values_list("created_at", flat=True)
        .first()
    )


def get_event(*, tenant: Tenant, event_id: str) -> Event:
    """:raises NoSuchEvent: no such event in this tenant."""
    event = Event.objects.filter(tenant=tenant, id=event_id).first()
    if event is None:
        raise NoSuchEvent(f"No event {event_id}.")
    return event


def endpoints_of(*, tenant: Tenant) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(tenant=tenant)


def get_endpoint(*, tenant: Tenant, endpoint_id: str) -> WebhookEndpoint:
    """:raises NoSuchWebhookEndpoint: no such endpoint in this tenant."""
    endpoint = endpoints_of(tenant=tenant).filter(pk=endpoint_id).first()
    if endpoint is None:
        raise NoSuchWebhookEndpoint(f"No webhook endpoint {endpoint_id}.")
    return endpoint


def deliveries_of(*, tenant: Tenant, endpoint_id: str) -> QuerySet[Delivery]:
    """The endpoint's deliveries, with their events' ids and types.

    :raises NoSuchWebhookEndpoint: no such endpoint in this tenant.
    """
    endpoint = get_endpoint(tenant=tenant, endpoint_id=endpoint_id)
    return Delivery.objects.filter(endpoint=endpoint).select_related("event")
