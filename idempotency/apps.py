from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    verbose_name = "Idempotency keys"

    def ready(self) -> None:
        from idempotency.metrics import KeysCollector
        from observability.metrics import register_collector

        register_collector(KeysCollector())
