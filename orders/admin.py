"""Admin for the catalog, orders and payments.

Only the catalog is editable. Orders and payments change only through
their commands (row locks, the one-live-payment constraint, forward-only
statuses, the provider key derived from the payment): a form that wrote
them directly would bypass every one of those guarantees, so their pages
are for reading.
"""

from django.contrib import admin
from django.http import HttpRequest

from accounts.admin import ReadOnlyAdminMixin
from orders.models import Order, OrderItem, Payment, Product


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    """The catalog. Safe to edit: orders copy prices when placed, so past orders keep theirs."""

    list_display = ("sku", "name", "unit_price", "currency")
    list_filter = ("currency",)
    search_fields = ("sku", "name")
    ordering = ("sku",)
    list_per_page = 100

    def get_readonly_fields(
        self, request: HttpRequest, obj: Product | None = None
    ) -> tuple[str, ...]:
        # The SKU is the primary key: the admin would save a changed one as
        # a copy under the new SKU rather than rename the product.
        return ("sku",) if obj is not None else ()


class OrderItemInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = OrderItem
    fields = ("position", "sku", "qty", "unit_price", "line_total")
    readonly_fields = fields
    extra = 0


class PaymentInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Payment
    fields = (
        "id",
        "status",
        "amount",
        "currency",
        "payment_method",
        "failure_code",
        "provider_charge_id",
        "created_at",
    )
    readonly_fields = fields
    extra = 0
    show_change_link = True


@admin.register(Order)
class OrderAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Orders, read-only: they change only through their commands (see the module docstring)."""

    list_display = (
        "id",
        "tenant",
        "customer_id",
        "status",
        "total_amount",
        "currency",
        "created_at",
    )
    list_select_related = ("tenant",)
    list_filter = ("status",)
    # Exact matches: ids are pasted whole, and an exact id is an index
    # look-up (order_id_unique_per_tenant) where a substring search would
    # scan the table.
    search_fields = ("id__exact", "customer_id__exact")
    search_help_text = "An order id or a customer id, exactly."
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False
    inlines = (OrderItemInline, PaymentInline)


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Payments, read-only.

    A payment's status is written only by the worker that charged it, by
    compare-and-set, together with its operation and order; editing it here
    would desynchronise the three and could allow a second charge.
    """

    list_display = (
        "id",
        "order",
        "tenant",
        "status",
        "amount",
        "currency",
        "payment_method",
        "failure_code",
        "created_at",
    )
    list_select_related = ("tenant", "order")
    list_filter = ("status",)
    search_fields = ("id__exact", "order__id__exact", "provider_charge_id__exact")
    search_help_text = "A payment, order or provider charge id, exactly."
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False
