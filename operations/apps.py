from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Asynchronous operations"

    def ready(self) -> None:
        from celery import current_app

        from observability.metrics import register_collector
        from observability.worker_metrics import register_series
        from operations.metrics import OperationsCollector, initialise_series
        from operations.sweep import OperationSweep

        register_collector(OperationsCollector())
        register_series(initialise_series)
        # Every worker of this process's Celery app sweeps (operations.sweep).
        current_app.steps["consumer"].add(OperationSweep)
