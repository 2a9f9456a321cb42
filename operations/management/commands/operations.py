from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from operations import registry
from operations.models import Operation
from operations.selectors import age, most_attempted, oldest_processing, tallies


def _duration(seconds: float) -> str:
    """``42.1s``, ``7m05s``, ``3h02m``: an age read at a glance."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Command(BaseCommand):
    help = (
        "What the asynchronous side is doing: operations processing, and ended in the last"
        " hour, by kind and status, with their attempts and published messages; the oldest"
        " processing operation of each kind; and the processing operations that have used"
        " most of their attempt budget."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--limit",
            type=int,
            default=10,
            help="How many of the most attempted processing operations to list (default 10).",
        )

    def handle(self, *args: Any, limit: int, **options: Any) -> None:
        if limit < 0:
            raise CommandError("--limit must be at least 0.")
        now = timezone.now()
        write = self.stdout.write

        counted = tallies(now=now)
        write(
            "Operations processing, and ended in the last hour, by kind and status"
            " (copies: the messages beyond the first of each):"
        )
        write(f"  {'kind':<16} {'status':<11} {'count':>9} {'attempts':>9} {'copies':>9}")
        for t in counted:
            copies = t.messages - t.count
            write(f"  {t.kind:<16} {t.status:<11} {t.count:>9} {t.attempts:>9} {copies:>9}")
        total = sum(t.count for t in counted)
        messages = sum(t.messages for t in counted)
        per = f"{messages / total:.2f}" if total else "-"
        write(f"  {total} operations, {messages} messages published: {per} per operation")

        write("")
        write("Oldest processing operation of each kind:")
        for kind, oldest in oldest_processing().items():
            if oldest is None:
                write(f"  {kind:<16} none")
            else:
                write(
                    f"  {kind:<16} {oldest.id}  {_duration(age(oldest, now))} old,"
                    f" attempt {oldest.attempts} of {_budget(oldest)}"
                )

        write("")
        write("Processing operations with the most attempts (of their kind's budget):")
        listed = most_attempted(limit)
        if not listed:
            write("  none")
        for operation in listed:
            last = (
                f"{operation.error_code}: {operation.error_message}"
                if operation.error_code
                else "-"
            )
            write(
                f"  {operation.id}  {operation.kind:<16}"
                f" attempts {operation.attempts}/{_budget(operation)}"
                f"  copies {max(0, operation.publications - 1)}"
                f"  {_duration(age(operation, now))} old  last failure: {last}"
            )


def _budget(operation: Operation) -> int | str:
    """The operation's attempt budget: its kind's (OPERATION_MAX_ATTEMPTS, WEBHOOK_MAX_ATTEMPTS)."""
    try:
        return registry.kind_of(operation).retry.budget()
    except LookupError:
        return "?"
