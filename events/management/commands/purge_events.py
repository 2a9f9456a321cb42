from typing import Any

from django.core.management.base import BaseCommand

from events.retention import purge, retention


class Command(BaseCommand):
    help = (
        "Delete events older than EVENT_RETENTION, with their deliveries (an event whose"
        " delivery is still pending is kept), and the webhook endpoints disabled as long ago"
        " that no delivery names. Prints how many."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result = purge()
        self.stdout.write(
            f"Purged {result.deleted} events older than {retention().days} days"
            f" in {result.seconds:.2f} s ({result.batches} batches), and {result.endpoints}"
            " webhook endpoints disabled as long ago."
        )
