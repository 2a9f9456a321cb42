"""Every call to the payment provider counted by its result, and traced.

``provider_calls_total{call, result}`` is where an operator sees the provider
fail: ``unavailable`` is a timeout or a 5xx (the outcome is unknown, the
call is retried), ``error`` an answer our code did not expect. Counted in
the worker making the call (observability/worker_metrics.py).
"""

from collections.abc import Callable, Mapping
from typing import TypeVar

from prometheus_client import Counter

from observability.tracing import span
from provider.gateway import PaymentGateway, ProviderResult, ProviderUnavailable

PROVIDER_CALLS = Counter(
    "provider_calls_total", "Calls to the payment provider, by result.", ["call", "result"]
)

R = TypeVar("R", ProviderResult, ProviderResult | None)


class ObservedGateway:
    """A :class:`PaymentGateway` that counts and traces the calls of the one it wraps."""

    def __init__(self, gateway: PaymentGateway) -> None:
        self._gateway = gateway
        self.payment_methods: Mapping[str, str] = gateway.payment_methods

    def charge(
        self,
        *,
        provider_key: str,
        payment_id: str,
        amount: int,
        currency: str,
        payment_method: str,
    ) -> ProviderResult:
        return _observed(
            "charge",
            payment_id,
            lambda: self._gateway.charge(
                provider_key=provider_key,
                payment_id=payment_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
            ),
        )

    def refund(
        self, *, provider_key: str, payment_id: str, amount: int, currency: str
    ) -> ProviderResult:
        return _observed(
            "refund",
            payment_id,
            lambda: self._gateway.refund(
                provider_key=provider_key, payment_id=payment_id, amount=amount, currency=currency
            ),
        )

    def look_up(self, *, provider_key: str) -> ProviderResult | None:
        return _observed("look_up", "", lambda: self._gateway.look_up(provider_key=provider_key))


# A look-up that finds nothing is ``not_found``.
_RESULTS = {True: "succeeded", False: "declined", None: "not_found"}


def _observed(call: str, payment_id: str, make: Callable[[], R]) -> R:
    attributes: dict[str, str | int] = {"payment.id": payment_id} if payment_id else {}
    result = "error"
    try:
        with span(f"provider.{call}", attributes):
            answer = make()
        result = _RESULTS[None if answer is None else answer.succeeded]
        return answer
    except ProviderUnavailable:
        result = "unavailable"
        raise
    finally:
        PROVIDER_CALLS.labels(call, result).inc()


def initialise_series() -> None:
    """Every series at 0 (observability.worker_metrics.register_series)."""
    for call in ("charge", "refund", "look_up"):
        for result in (*_RESULTS.values(), "unavailable", "error"):
            PROVIDER_CALLS.labels(call, result)
