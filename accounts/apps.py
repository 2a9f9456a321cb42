from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Tenants and API clients"

    def ready(self) -> None:
        from accounts import schema  # noqa: F401 - registers the bearer scheme's description
