"""A payment provider simulator that behaves like a real one where it matters.

Payment methods (:attr:`SimulatedProvider.payment_methods`; the API refuses
any other):

- ``pm_card_ok``: the charge succeeds.
- ``pm_card_declined``: the charge is refused with ``card_declined``.
- ``pm_card_flaky``: the first call makes the charge but its answer is
  lost (a timeout), the second answers 503, and later calls succeed with
  the charge made by the first, which only a caller that reuses its
  provider key gets right.
- ``pm_card_provider_down``: every call is refused with a 503 before
  anything is charged, as by a provider in an outage; its look-up
  (:meth:`SimulatedProvider.look_up`, another service at a real
  provider) still answers, and finds nothing.

``manage.py provider_outage start`` makes the whole provider unreachable
(:class:`provider.models.Outage`): every call, look-ups too, times out
until ``provider_outage end``.

It deduplicates by provider key and keeps its own ledger
(``manage.py provider_ledger``) in transactions of its own, as a remote
provider would, in a database of its own when ``PROVIDER_DATABASE_URL``
names one (:mod:`provider.routers`). Like a remote call, it refuses to run inside the caller's
database transaction: holding a transaction open across a network call
would hold its locks for as long as the provider takes, and a rollback
would not undo the charge. ``PAYMENT_PROVIDER_LATENCY`` (seconds) delays
each call.
"""

import time

from django.conf import settings
from django.db import IntegrityError, transaction

from api.ids import new_id
from provider.gateway import ProviderResult, ProviderUnavailable
from provider.models import Attempt, LedgerEntry, Outage
from provider.routers import provider_database

OK = "pm_card_ok"
DECLINED = "pm_card_declined"
FLAKY = "pm_card_flaky"
PROVIDER_DOWN = "pm_card_provider_down"
# pm_card_flaky fails this many calls per key before it answers.
FLAKY_FAILURES = 2


class SimulatedProvider:
    payment_methods = {
        OK: "The charge succeeds.",
        DECLINED: 'The charge is refused: the payment fails with `failureCode: "card_declined"`.',
        FLAKY: (
            "The provider times out, then answers 503, then succeeds: the worker "
            "retries and the customer is charged once."
        ),
        PROVIDER_DOWN: (
            "The provider refuses every call with a 503, charging nothing: after "
            "`OPERATION_MAX_ATTEMPTS` attempts the payment fails with "
            '`failureCode: "provider_unavailable"`.'
        ),
    }

    def charge(
        self,
        *,
        provider_key: str,
        payment_id: str,
        amount: int,
        currency: str,
        payment_method: str,
    ) -> ProviderResult:
        attempt = self._count_attempt(provider_key)
        if payment_method == PROVIDER_DOWN:
            raise ProviderUnavailable("503 Service Unavailable")
        if payment_method == FLAKY and attempt == FLAKY_FAILURES:
            raise ProviderUnavailable("503 Service Unavailable")
        entry = self._record_once(
            provider_key=provider_key,
            kind=LedgerEntry.Kind.CHARGE,
            payment_id=payment_id,
            amount=amount,
            currency=currency,
            payment_method=payment_method,
            failure_code="card_declined" if payment_method == DECLINED else "",
        )
        if payment_method == FLAKY and attempt < FLAKY_FAILURES:
            # The charge was made, but its answer never reaches the caller.
            raise ProviderUnavailable("timed out")
        return self._result(entry)

    def refund(
        self, *, provider_key: str, payment_id: str, amount: int, currency: str
    ) -> ProviderResult:
        self._count_attempt(provider_key)
        entry = self._record_once(
            provider_key=provider_key,
            kind=LedgerEntry.Kind.REFUND,
            payment_id=payment_id,
            amount=amount,
            currency=currency,
            payment_method="",
            failure_code="",
        )
        return self._result(entry)

    def look_up(self, *, provider_key: str) -> ProviderResult | None:
        self._call()
        entry = LedgerEntry.objects.filter(provider_key=provider_key).first()
        return None if entry is None else self._result(entry)

    @staticmethod
    def _call() -> None:
        # The caller's transaction is one on the service's database.
        if transaction.get_connection().in_atomic_block:
            raise RuntimeError("Call the payment provider outside any database transaction.")
        time.sleep(settings.PAYMENT_PROVIDER_LATENCY)
        if Outage.objects.exists():
            raise ProviderUnavailable("timed out")

    @classmethod
    def _count_attempt(cls, provider_key: str) -> int:
        """Count a charge or refund call under ``provider_key``; the count, this one included."""
        cls._call()
        with transaction.atomic(using=provider_database()):
            attempt, _ = Attempt.objects.select_for_update().get_or_create(
                provider_key=provider_key
            )
            attempt.count += 1
            attempt.save(update_fields=["count"])
        return attempt.count

    @staticmethod
    def _record_once(*, provider_key: str, **fields: object) -> LedgerEntry:
        failure_code = str(fields.pop("failure_code"))
        try:
            with transaction.atomic(using=provider_database()):
                return LedgerEntry.objects.create(
                    charge_id=new_id("ch" if fields["kind"] == "charge" else "re"),
                    provider_key=provider_key,
                    succeeded=not failure_code,
                    failure_code=failure_code,
                    **fields,
                )
        except IntegrityError:
            # A repeat of a call this provider already answered.
            return LedgerEntry.objects.get(provider_key=provider_key)

    @staticmethod
    def _result(entry: LedgerEntry) -> ProviderResult:
        return ProviderResult(
            charge_id=entry.charge_id, succeeded=entry.succeeded, failure_code=entry.failure_code
        )
