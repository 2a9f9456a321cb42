from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from operations.retention import MAX_BATCHES, PURGE_BATCH, purge, retention


class Command(BaseCommand):
    help = (
        "Delete operations that ended (succeeded or failed) longer than OPERATION_RETENTION"
        " ago, in batches; a processing operation is never deleted. Prints how many."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=PURGE_BATCH,
            help=f"Operations deleted per transaction (default {PURGE_BATCH}).",
        )
        parser.add_argument(
            "--max-batches",
            type=int,
            default=MAX_BATCHES,
            help=f"Batches at most in this run (default {MAX_BATCHES}); the next run goes on.",
        )

    def handle(self, *args: Any, batch_size: int, max_batches: int, **options: Any) -> None:
        if batch_size < 1 or max_batches < 1:
            raise CommandError("--batch-size and --max-batches must be at least 1.")
        result = purge(batch_size=batch_size, max_batches=max_batches)
        rest = (
            ""
            if result.finished
            else f" Stopped at {max_batches} batches: more remain, for the next run."
        )
        self.stdout.write(
            f"Purged {result.deleted} operations ended more than {_span()} ago"
            f" in {result.seconds:.2f} s ({result.batches} batches of at most {batch_size})." + rest
        )


def _span() -> str:
    """The retention, in days when it is whole days (the default's 30), else in seconds."""
    seconds = int(retention().total_seconds())
    days, rest = divmod(seconds, 86400)
    return f"{days} days" if days and not rest else f"{seconds} s"
