"""Admin for events and webhooks, read-only.

An event is a fact that consumers have read; a delivery's row is written
by its worker with compare-and-sets. A form save could rewrite either
under a worker's feet. Endpoints are created and disabled through the API,
as commands, and their secret is never shown.
"""

from django.contrib import admin

from accounts.admin import ReadOnlyAdminMixin
from events.models import Delivery, Event, WebhookEndpoint


@admin.register(Event)
class EventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "type", "tenant", "resource", "created_at")
    list_select_related = ("tenant",)
    list_filter = ("type",)
    # Exact matches: a substring search would scan the whole table.
    search_fields = ("id__exact", "resource__exact")
    search_help_text = "An event id, or the path of its resource (/v1/orders/ord_…), exactly."
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "tenant", "url", "status", "busy_until", "created_at")
    list_select_related = ("tenant",)
    list_filter = ("status",)
    search_fields = ("id__exact",)
    # Everything but the secret: it signs the tenant's deliveries.
    fields = ("id", "tenant", "url", "event_types", "status", "busy_until", "created_at")
    ordering = ("-created_at",)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "endpoint",
        "event",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "created_at",
    )
    list_select_related = ("endpoint", "event")
    list_filter = ("status",)
    search_fields = ("id__exact", "endpoint__id__exact", "event__id__exact")
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False
