from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from idempotency.retention import PURGE_BATCH, purge, purge_pause


class Command(BaseCommand):
    help = (
        "Delete idempotency keys older than IDEMPOTENCY_KEY_TTL, in batches that pass over"
        " keys in use; their keys become new keys. Prints how many and how long."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=PURGE_BATCH,
            help=f"Keys deleted per statement (default {PURGE_BATCH}).",
        )
        parser.add_argument(
            "--pause",
            type=float,
            default=None,
            help="Seconds to wait between batches (default: the IDEMPOTENCY_PURGE_PAUSE setting).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch_size = options["batch_size"]
        pause = purge_pause() if options["pause"] is None else options["pause"]
        if batch_size < 1 or pause < 0:
            raise CommandError("--batch-size must be at least 1 and --pause at least 0.")
        # Said first, and flushed, so that whoever watches (tests/bench/keys.py)
        # knows when the deleting starts.
        self.stdout.write(
            f"Purging expired idempotency keys, in batches of {batch_size}, {pause:g} s apart."
        )
        self.stdout.flush()
        result = purge(batch_size=batch_size, pause=pause)
        self.stdout.write(
            f"Purged {result.deleted} expired idempotency keys in {result.seconds:.2f} s"
            f" ({result.rate:,.0f} keys/s, {result.batches} batches,"
            f" the longest {result.longest_batch_seconds * 1000:.0f} ms)."
        )
