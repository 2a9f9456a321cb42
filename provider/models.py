"""The simulated provider's own records.

They belong to the simulated provider, not to us: they stand for the
provider's database, written in its own transactions, as a remote
provider's would be. Nothing of the service reads them; the ledger is
there to be audited (``manage.py provider_ledger``): one charge per
payment, whatever happened on the way.
"""

from django.db import models


class LedgerEntry(models.Model):
    """A charge or refund the simulated provider made, once per provider key."""

    class Kind(models.TextChoices):
        CHARGE = "charge"
        REFUND = "refund"

    charge_id = models.CharField(primary_key=True, max_length=32)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # The caller's idempotency key: the provider makes one entry per key.
    provider_key = models.CharField(max_length=100, unique=True)
    payment_id = models.CharField(max_length=32)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    payment_method = models.CharField(max_length=64)
    succeeded = models.BooleanField()
    failure_code = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "charge_id"]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.kind} {self.charge_id} ({self.provider_key})"


class Attempt(models.Model):
    """How many charge and refund calls the simulated provider has seen per key.

    It drives ``pm_card_flaky``; look-ups are not counted.
    """

    provider_key = models.CharField(primary_key=True, max_length=100)
    count = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.provider_key}: {self.count}"


class Outage(models.Model):
    """While one is recorded, nobody can reach the simulated provider: every call times out.

    Charges, refunds and look-ups alike, as when a provider's network is
    down: nothing is charged, and nothing can be asked about a charge made
    before. It is what leaves an operation out of attempts and unsettled
    (``manage.py operations settle``); ``manage.py provider_outage`` starts
    and ends it, for every process at once.
    """

    started_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"outage since {self.started_at:%Y-%m-%d %H:%M:%S}"
