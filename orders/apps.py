from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Orders and payments"

    def ready(self) -> None:
        # Registers the operation kinds payment.charge and order.refund, and
        # (through domain_events) the event types of orders and payments.
        from orders import handlers  # noqa: F401
