from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Orders and payments"

    def ready(self) -> None:
        # Registers the operation kinds payment.charge and order.refund.
        from orders import services  # noqa: F401
