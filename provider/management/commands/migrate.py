"""Django's ``migrate``, which also migrates the provider's own database when there is one.

``python manage.py migrate`` creates everything the service needs
(docs/SPECIFICATION.md §1). With ``PROVIDER_DATABASE_URL`` set, part of
that is in another database, which Django's command would leave alone
unless asked with ``--database provider``: run from the command line
without ``--database`` (or with the default one), this one migrates both.
Called from code (``call_command``, as the test runner does for each
database in turn), it is Django's command unchanged.
"""

from typing import Any

from django.core.management.commands import migrate
from django.db import DEFAULT_DB_ALIAS, connections

from provider.routers import PROVIDER_DATABASE


class Command(migrate.Command):
    # Whether manage.py runs it, rather than code through call_command.
    from_command_line = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.from_command_line = True
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        super().handle(*args, **options)
        also_provider = (
            self.from_command_line
            and options["database"] == DEFAULT_DB_ALIAS
            and PROVIDER_DATABASE in connections.settings
        )
        if also_provider:
            super().handle(*args, **{**options, "database": PROVIDER_DATABASE})
