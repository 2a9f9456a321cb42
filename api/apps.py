from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The HTTP layer every app shares: errors, parsing, pagination, the OpenAPI machinery.

    An app so that its drf-spectacular extensions are loaded before any
    schema is generated.
    """

    name = "api"
    verbose_name = "HTTP API layer"

    def ready(self) -> None:
        from api.openapi import problems, strict  # noqa: F401 - registers the schema extensions
        from observability.health import ReadinessCollector
        from observability.metrics import register_collector

        register_collector(ReadinessCollector())
