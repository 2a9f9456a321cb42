from django.apps import AppConfig


class ProviderConfig(AppConfig):
    """A payment provider simulator, standing in for a remote provider (Stripe, Adyen…).

    Its own app, because it is not part of the service: it keeps its own
    records as a remote provider would, and the service reaches it only
    through :class:`provider.gateway.PaymentGateway`.
    """

    name = "provider"
    verbose_name = "Payment provider simulator"

    def ready(self) -> None:
        from observability.worker_metrics import register_series
        from provider.observed import initialise_series

        register_series(initialise_series)
