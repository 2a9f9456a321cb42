"""The payment provider, as our code sees it.

A real provider (Stripe, Adyen, YooKassa…) implements :class:`PaymentGateway`;
the built-in simulator (:mod:`provider.simulator`) does so for development and
tests. Every call carries a provider idempotency key: the provider makes at
most one charge or refund per key and answers repeats with the original
result, which is what makes retrying a call whose answer was lost safe.

Every call must be bounded in all, from connecting to the last byte of the
answer, however slowly the provider sends it: a gateway over HTTP gives
each call one deadline (as events.outbound does for webhook attempts) and
raises :class:`ProviderUnavailable` when it passes. A call without one can
hold a worker's slot for as long as the provider trickles, and the worker's
lease renewals keep the operation from being taken over meanwhile. The
simulator is in-process: each call takes ``PAYMENT_PROVIDER_LATENCY``.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


class ProviderUnavailable(Exception):
    """The call's outcome is unknown (timeout, 5xx): retry it with the same key."""


@dataclass(frozen=True)
class ProviderResult:
    charge_id: str
    succeeded: bool
    # The provider's reason for a refusal, such as "card_declined".
    failure_code: str = ""


class PaymentGateway(Protocol):
    #: The payment methods this provider accepts, each with what it does for
    #: people reading the API docs. The API refuses any other method before it
    #: records a payment (orders.serializers), and its schema lists these as
    #: an enum, so a method the provider does not know never reaches it.
    payment_methods: Mapping[str, str]

    def charge(
        self,
        *,
        provider_key: str,
        payment_id: str,
        amount: int,
        currency: str,
        payment_method: str,
    ) -> ProviderResult:
        """Charge once per ``provider_key``.

        :raises ProviderUnavailable: the outcome is unknown.
        """
        ...

    def refund(
        self, *, provider_key: str, payment_id: str, amount: int, currency: str
    ) -> ProviderResult:
        """Refund once per ``provider_key``.

        :raises ProviderUnavailable: the outcome is unknown.
        """
        ...

    def look_up(self, *, provider_key: str) -> ProviderResult | None:
        """What the provider made under ``provider_key``: its charge or refund, or None.

        Asked before a charge or refund whose attempts have run out is called
        failed, since an attempt that timed out may have made it. Real
        providers answer it from their own records (retrieving a charge by
        the caller's reference or idempotency key).

        :raises ProviderUnavailable: the provider could not say.
        """
        ...
