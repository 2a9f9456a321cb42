from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from provider.models import Outage


class Command(BaseCommand):
    help = (
        "Make the payment provider simulator unreachable (start), reachable again (end), or say"
        " which it is (status). While it is unreachable every call times out, look-ups too,"
        " in every process that uses the simulator."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("action", choices=["start", "end", "status"])

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "start" and not Outage.objects.exists():
            Outage.objects.create()
        elif action == "end":
            Outage.objects.all().delete()
        outage = Outage.objects.first()
        self.stdout.write("reachable" if outage is None else f"unreachable: {outage}")
