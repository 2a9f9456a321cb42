"""A retrying, typed client of the order service, written to be read and copied.

The service makes every command safe to repeat: a command carries an
``Idempotency-Key``, the service executes a key once and answers every
repeat with the stored answer. This package is the other half of that
promise, the part only a client can keep:

- one key per intended action, the same on every retry, kept (on disk,
  across crashes and reruns, when asked) for as long as the service keeps
  it (:mod:`order_service_client.keys`);
- retries of exactly the outcomes that may change, waiting as the service
  says or with jittered backoff, within a deadline that outlasts a
  failover and never outlasts the key's retention, which the service
  publishes (:mod:`order_service_client.retry`,
  :mod:`order_service_client.policy`);
- the service's problem+json errors as exceptions
  (:mod:`order_service_client.errors`);
- orders placed under ids the caller chooses (``put_order``), and commands
  conditional on the version read (``get_order_versioned``, ``if_match``);
- polling of asynchronous operations at the service's ``Retry-After``,
  and cursor pagination;
- for a reader of the event feed, its checkpoint committed in the same
  transaction as its own effect, and a typed stop when the checkpoint is
  older than the feed's retention (:mod:`order_service_client.feed`);
- for a webhook endpoint, the consumer's half: deliveries verified with
  the Standard Webhooks reference verifier, and each event handled once
  however often it is delivered (:mod:`order_service_client.webhooks`).

::

    from order_service_client import OrderServiceClient, SQLiteKeyStore

    keys = SQLiteKeyStore("client-keys.sqlite3")
    with OrderServiceClient("http://127.0.0.1:8000", token, key_store=keys) as client:
        created = client.create_order(
            customer_id="c-1", currency="RUB", items=[{"sku": "ABC", "qty": 2}],
            intent="order:cart-81",   # a rerun within 24 h replays this order
        )
        order = created.body["order"]
        accepted = client.pay(
            order_id=order["id"], amount=order["totalAmount"], currency=order["currency"],
            payment_method="pm_card_ok", intent=f"pay:{order['id']}",
        )
        operation = client.wait(accepted)

The rules, each with its reason, are in :mod:`order_service_client.client`.
The package needs httpx, and standardwebhooks for the deliveries;
:class:`AsyncOrderServiceClient` is the asyncio twin.
"""

from order_service_client._core import CommandResult, Versioned
from order_service_client._version import __version__
from order_service_client.aio import AsyncOrderServiceClient
from order_service_client.client import OrderServiceClient
from order_service_client.errors import (
    ERROR_CLASSES,
    ApiError,
    AuthenticationFailed,
    BadRequest,
    ClientError,
    Conflict,
    FeedCheckpointLost,
    IdempotencyKeyConflict,
    IdempotencyKeyInProgress,
    KeyLifetimeOver,
    NotFound,
    OperationTimeout,
    OrderAlreadyExists,
    OrderServiceError,
    PermissionDenied,
    PreconditionFailed,
    RetriesExhausted,
    ServerError,
    Throttled,
    Unprocessable,
    ValidationFailed,
    error_from_response,
)
from order_service_client.feed import FeedCheckpointMoved, SQLiteFeedCheckpoint
from order_service_client.inbox import (
    DEFAULT_INBOX_LEASE,
    DEFAULT_INBOX_RETENTION,
    DeliveryInProgress,
    Inbox,
    MemoryInbox,
    SQLiteInbox,
)
from order_service_client.keys import (
    DEFAULT_RETENTION,
    KeyStore,
    LeasingKeyStore,
    MemoryKeyStore,
    SQLiteKeyStore,
    new_key,
)
from order_service_client.policy import ServicePolicy
from order_service_client.retry import FAILOVER_GOAL_S, RetryEvent, RetryPolicy
from order_service_client.webhooks import (
    DEFAULT_WEBHOOK_TOLERANCE,
    WebhookEvent,
    WebhookVerificationFailed,
    WebhookVerifier,
)

__all__ = [
    "DEFAULT_INBOX_LEASE",
    "DEFAULT_INBOX_RETENTION",
    "DEFAULT_RETENTION",
    "DEFAULT_WEBHOOK_TOLERANCE",
    "ERROR_CLASSES",
    "FAILOVER_GOAL_S",
    "ApiError",
    "AsyncOrderServiceClient",
    "AuthenticationFailed",
    "BadRequest",
    "ClientError",
    "CommandResult",
    "Conflict",
    "DeliveryInProgress",
    "FeedCheckpointLost",
    "FeedCheckpointMoved",
    "IdempotencyKeyConflict",
    "IdempotencyKeyInProgress",
    "Inbox",
    "KeyLifetimeOver",
    "KeyStore",
    "LeasingKeyStore",
    "MemoryInbox",
    "MemoryKeyStore",
    "NotFound",
    "OperationTimeout",
    "OrderAlreadyExists",
    "OrderServiceClient",
    "OrderServiceError",
    "PermissionDenied",
    "PreconditionFailed",
    "RetriesExhausted",
    "RetryEvent",
    "RetryPolicy",
    "SQLiteFeedCheckpoint",
    "SQLiteInbox",
    "SQLiteKeyStore",
    "ServerError",
    "ServicePolicy",
    "Throttled",
    "Unprocessable",
    "ValidationFailed",
    "Versioned",
    "WebhookEvent",
    "WebhookVerificationFailed",
    "WebhookVerifier",
    "__version__",
    "error_from_response",
    "new_key",
]
