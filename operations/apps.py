from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Asynchronous operations"

    def ready(self) -> None:
        from observability.metrics import register_collector
        from operations.metrics import OperationsCollector

        register_collector(OperationsCollector())
