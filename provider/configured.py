"""The provider this deployment uses: the class ``PAYMENT_GATEWAY`` names, observed.

Apart from provider.gateway (the interface every provider implements) and
provider.observed (its metrics and spans, which need that interface), so
that each imports only what it builds on.
"""

from django.conf import settings
from django.utils.module_loading import import_string

from provider.gateway import PaymentGateway
from provider.observed import ObservedGateway


def get_gateway() -> PaymentGateway:
    """The configured provider (``PAYMENT_GATEWAY``, a dotted path to a class), observed."""
    return ObservedGateway(import_string(settings.PAYMENT_GATEWAY)())
