from typing import Any

from django.core.management.base import BaseCommand

from orders.models import Product

DEMO_CATALOG = [
    # (sku, name, unit price in minor units, currency)
    ("ABC", "Demo item ABC", 1990, "RUB"),
    ("XYZ", "Demo item XYZ", 50000, "RUB"),
    ("USD1", "Demo item priced in dollars", 1200, "USD"),
]


class Command(BaseCommand):
    help = "Create the demo catalog. Safe to run any number of times."

    def handle(self, *args: Any, **options: Any) -> None:
        for sku, name, unit_price, currency in DEMO_CATALOG:
            Product.objects.update_or_create(
                sku=sku, defaults={"name": name, "unit_price": unit_price, "currency": currency}
            )
        self.stdout.write(f"Demo catalog ready: {', '.join(s for s, *_ in DEMO_CATALOG)}.")
