from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from idempotency.headers import key_digest


class Command(BaseCommand):
    help = (
        "Print the digest that log lines carry for an Idempotency-Key"
        " (field idempotency_key_digest), to find one key's attempts in the logs."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("key", help="The key, as the client sent it.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(str(key_digest(options["key"])))
