"""Where the simulated provider keeps its records: a database of its own, when it has one.

A real provider's records are not in our database: they survive whatever
happens to ours. That matters most when ours fails over. A charge the
provider made under ``charge-pay_X`` stays made even if the payment row
that asked for it is lost with a primary that died before its standby had
it, and only a ledger kept apart can show it. So ``PROVIDER_DATABASE_URL``
gives the simulator the database alias :data:`PROVIDER_DATABASE`, and the
fault scenarios audit the charges there (tests/faults/test_failover.py).
Unset, the provider app lives in the service's own database, and nothing
else changes (``make run``, the test suite).
"""

from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

# The alias config/settings.py gives PROVIDER_DATABASE_URL.
PROVIDER_DATABASE = "provider"

# The simulator's tables were first created by the orders app, as these two
# models of its migration 0002, then adopted by provider 0001 without
# touching the database, and renamed by provider 0002. On the provider's own
# database those two steps of orders' history are what create them.
_CREATED_BY_ORDERS = {("orders", "providerattempt"), ("orders", "providerledgerentry")}


def provider_database() -> str:
    """The alias of the database the provider's records are in."""
    return PROVIDER_DATABASE if PROVIDER_DATABASE in settings.DATABASES else DEFAULT_DB_ALIAS


class ProviderRouter:
    """The provider app to :func:`provider_database`, everything else to the default one."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return provider_database() if model._meta.app_label == "provider" else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return self.db_for_read(model, **hints)

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if PROVIDER_DATABASE not in settings.DATABASES:
            return None
        providers = app_label == "provider" or (app_label, model_name) in _CREATED_BY_ORDERS
        return providers == (db == PROVIDER_DATABASE)
