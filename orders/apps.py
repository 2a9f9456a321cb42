from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Orders and payments"

    def ready(self) -> None:
        # Registers the handlers of payment.charge and order.refund.
        from orders import payments  # noqa: F401
