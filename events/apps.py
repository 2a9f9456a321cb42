from django.apps import AppConfig


class EventsConfig(AppConfig):
    name = "events"
    verbose_name = "Events and webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from events import delivery  # noqa: F401 - registers the webhook.deliver kind
        from events.metrics import DeliveriesCollector, FeedCollector, initialise_series
        from observability.metrics import register_collector
        from observability.worker_metrics import register_series

        register_collector(DeliveriesCollector())
        register_collector(FeedCollector())
        register_series(initialise_series)
