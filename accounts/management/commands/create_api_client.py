from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from accounts.services import create_api_client


class Command(BaseCommand):
    help = (
        "Create tenant TENANT if needed and principal NAME in it, and print a new API token "
        "as the last line. Only a hash of the token is stored: it cannot be shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")
        parser.add_argument("name")
        parser.add_argument(
            "--revoke-earlier",
            action="store_true",
            help="Revoke the principal's earlier tokens: a rotation (make run uses it).",
        )

    def handle(
        self, *args: Any, tenant: str, name: str, revoke_earlier: bool, **options: Any
    ) -> None:
        issued = create_api_client(tenant_slug=tenant, name=name, revoke_earlier=revoke_earlier)
        self.stderr.write(f"API token for {issued.principal} (shown once):")
        self.stdout.write(issued.token)
