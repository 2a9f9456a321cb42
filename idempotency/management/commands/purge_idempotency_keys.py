from typing import Any

from django.core.management.base import BaseCommand

from idempotency.services import purge_expired_keys


class Command(BaseCommand):
    help = "Delete idempotency keys older than IDEMPOTENCY_KEY_TTL; their keys become new keys."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"Purged {purge_expired_keys()} expired idempotency keys.")
