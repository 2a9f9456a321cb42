import json
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from provider.models import LedgerEntry
from provider.routers import provider_database


class Command(BaseCommand):
    help = (
        "Print every charge and refund of the payment provider simulator, one JSON object a line."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        # .iterator() streams through a server-side cursor. Inside a
        # transaction the cursor lives and dies with it; outside one Django
        # declares it WITH HOLD, to be read by later transactions that a
        # transaction-pooling PgBouncer may hand to another server session,
        # where it does not exist. One transaction is also one snapshot.
        with transaction.atomic(using=provider_database()):
            self._print_entries()

    def _print_entries(self) -> None:
        for entry in LedgerEntry.objects.iterator():
            self.stdout.write(
                json.dumps(
                    {
                        "chargeId": entry.charge_id,
                        "kind": entry.kind,
                        "providerKey": entry.provider_key,
                        "paymentId": entry.payment_id,
                        "amount": entry.amount,
                        "currency": entry.currency,
                        "paymentMethod": entry.payment_method,
                        "succeeded": entry.succeeded,
                        "failureCode": entry.failure_code or None,
                        "createdAt": entry.created_at.isoformat(),
                    }
                )
            )
