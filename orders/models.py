"""The catalog, orders and their lines."""

from functools import cached_property, partial

from django.db import models

from api.ids import new_id

# ``ord_`` and up to 64 characters a client chose (``PUT /v1/orders/{id}``);
# the ids the service makes are ``ord_`` and 25.
ORDER_ID_MAX_LENGTH = 68
ORDER_ID_PATTERN = r"ord_[A-Za-z0-9_-]{1,64}"


class Product(models.Model):
    """A catalog entry. The catalog is shared by all tenants."""

    sku = models.CharField(max_length=64, primary_key=True)
    name = models.CharField(max_length=200)
    # Minor units (kopecks, cents): money is never a float.
    unit_price = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)

    def __str__(self) -> str:
        return self.sku


class Order(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        PAID = "paid"
        CANCELLED = "cancelled"

    # The row's own key, which lines and payments reference; never shown.
    # Clients see ``id``, which they may choose (``PUT``), so it is unique
    # only per tenant: two tenants may each have an ``ord_1``, and neither
    # can tell.
    internal_id = models.CharField(primary_key=True, max_length=32, default=partial(new_id, "ord"))
    id = models.CharField(max_length=ORDER_ID_MAX_LENGTH)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="orders")
    customer_id = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    currency = models.CharField(max_length=3)
    total_amount = models.PositiveBigIntegerField()
    cancel_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # An id names one order per tenant. A PUT of an id that exists
            # finds it here: the database, not a look-up beforehand, decides
            # which of two concurrent PUTs creates the order. The id leads,
            # so that the admin's search by id alone is an index look-up too.
            models.UniqueConstraint(fields=["id", "tenant"], name="order_id_unique_per_tenant"),
        ]
        indexes = [
            # The list endpoint: a tenant's orders, newest first.
            models.Index(fields=["tenant", "-created_at", "-id"], name="order_tenant_newest"),
        ]

    def __str__(self) -> str:
        return self.id

    # What an answer shows of the order's relations. Read through them
    # (prefetched by the selectors, so at no query each), unless set by whoever
    # has just written them: a new order's answer reads nothing back.
    @cached_property
    def lines(self) -> list["OrderItem"]:
        return list(self.items.all())

    @cached_property
    def payment_ids(self) -> list[str]:
        return [payment.id for payment in self.payments.all()]


class OrderItem(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveSmallIntegerField()
    sku = models.CharField(max_length=64)
    qty = models.PositiveIntegerField()
    # Copied from the catalog when the order was placed: later price changes
    # do not rewrite history.
    unit_price = models.PositiveBigIntegerField()
    line_total = models.PositiveBigIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["order", "position"], name="order_item_position"),
        ]

    def __str__(self) -> str:
        return f"{self.order_id}#{self.position}"


class Payment(models.Model):
    """One attempt to charge an order."""

    class Status(models.TextChoices):
        PROCESSING = "processing"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        REFUNDED = "refunded"

    id = models.CharField(primary_key=True, max_length=32, default=partial(new_id, "pay"))
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="payments")
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    payment_method = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROCESSING)
    failure_code = models.CharField(max_length=64, blank=True)
    provider_charge_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            # The domain's own guard against charging an order twice, under
            # any number of idempotency keys: the database refuses a second
            # live payment of one order, whatever the code above it does.
            models.UniqueConstraint(
                fields=["order"],
                condition=models.Q(status__in=["processing", "succeeded", "refunded"]),
                name="payment_one_live_per_order",
            ),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def provider_key(self) -> str:
        """The provider's idempotency key for charging this payment.

        Derived from the payment, so every attempt, retry or redelivery of
        the charge names the same charge and the provider makes it once.
        """
        return f"charge-{self.id}"
