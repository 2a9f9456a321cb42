from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from operations import registry
from operations.errors import NoSuchOperation, NotSettled, StillUnanswered
from operations.models import Operation
from operations.selectors import age, most_attempted, oldest_processing, tallies, unsettled
from operations.settling import settle_operation


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
        " processing operation of each kind; the processing operations that have used most"
        " of their attempt budget; and those out of attempts that wait for the provider to"
        " say how they ended, which `operations settle <operationId>` ends."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--limit",
            type=int,
            default=10,
            help="How many operations each list shows (default 10).",
        )
        actions = parser.add_subparsers(dest="action", required=False, metavar="settle")
        settle = actions.add_parser(
            "settle",
            help=(
                "End an operation out of attempts whose provider cannot say how it ended:"
                " ask the provider once more, or record what you learned elsewhere."
            ),
            description=(
                "Without --outcome, the provider is asked once more and the operation ends as"
                " it answers; if it still cannot, nothing changes and the command fails."
                " With --outcome, the operation ends as you say: only on the word of the"
                " provider's support or dashboard, since the customer is told it too."
            ),
        )
        settle.add_argument("operation_id", metavar="operationId")
        settle.add_argument(
            "--outcome",
            choices=["succeeded", "failed"],
            help=(
                "What the provider holds under the operation's key: succeeded (it charged, or"
                " refunded) or failed (it holds nothing)."
            ),
        )
        settle.add_argument(
            "--reference",
            default="",
            help="With --outcome succeeded: the provider's id of the charge or refund.",
        )

    def handle(self, *args: Any, limit: int, **options: Any) -> None:
        if limit < 0:
            raise CommandError("--limit must be at least 0.")
        if options.get("action") == "settle":
            self._settle(options["operation_id"], options["outcome"], options["reference"])
        else:
            self._report(limit)

    def _settle(self, operation_id: str, outcome: str | None, reference: str) -> None:
        if reference and outcome != "succeeded":
            raise CommandError("--reference goes with --outcome succeeded.")
        verdict = (
            None
            if outcome is None
            else registry.Verdict(succeeded=outcome == "succeeded", reference=reference)
        )
        try:
            operation = settle_operation(operation_id, verdict=verdict)
        except StillUnanswered as exc:
            raise CommandError(
                f"{exc}. {operation_id} stays processing, and the workers keep asking every"
                " minute. If the provider's support or dashboard told you how it ended, say so:"
                " --outcome succeeded [--reference ID], or --outcome failed."
            ) from None
        except (NoSuchOperation, NotSettled) as exc:
            raise CommandError(f"{operation_id}: {exc}") from None
        ended = f"{operation.id} {operation.kind} ended {operation.status}"
        if operation.error_code:
            ended += f" ({operation.error_code}: {operation.error_message})"
        result = registry.result_path_of(operation)
        self.stdout.write(f"{ended}; its result: {result}" if result else ended)

    def _report(self, limit: int) -> None:
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

        write("")
        write(
            "Out of attempts, waiting for the provider to say how they ended"
            " (end one: operations settle <operationId>):"
        )
        waiting = unsettled(limit)
        if not waiting:
            write("  none")
        for operation in waiting:
            write(
                f"  {operation.id}  {operation.kind:<16} {_duration(age(operation, now))} old"
                f"  last failure: {operation.error_code or '-'}"
            )


def _budget(operation: Operation) -> int | str:
    """The operation's attempt budget: its kind's (OPERATION_MAX_ATTEMPTS, WEBHOOK_MAX_ATTEMPTS)."""
    try:
        return registry.kind_of(operation).retry.budget()
    except LookupError:
        return "?"
