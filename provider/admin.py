"""Admin for the payment provider simulator's records, read-only.

They stand for a remote provider's database: we look, and never write.
"""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from accounts.admin import ReadOnlyAdminMixin
from provider.models import Attempt, LedgerEntry


class SimulatorRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The payment provider simulator's own records, read-only.

    They stand for a remote provider's database, so we only look at them.
    The page titles say whose they are, since the model names alone read
    like our own payment tables.
    """

    def _title(self) -> str:
        return f"Payment provider simulator: {self.model._meta.verbose_name_plural}"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {"title": self._title(), **(extra_context or {})})

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return super().change_view(
            request, object_id, form_url, {"title": self._title(), **(extra_context or {})}
        )


@admin.register(LedgerEntry)
class LedgerEntryAdmin(SimulatorRecordAdmin):
    list_display = (
        "charge_id",
        "kind",
        "provider_key",
        "payment_id",
        "amount",
        "currency",
        "succeeded",
        "failure_code",
        "created_at",
    )
    list_filter = ("kind", "succeeded")
    search_fields = ("charge_id__exact", "provider_key__exact", "payment_id__exact")
    search_help_text = "A charge id, provider key or payment id, exactly."
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-charge_id")
    list_per_page = 50
    show_full_result_count = False


@admin.register(Attempt)
class AttemptAdmin(SimulatorRecordAdmin):
    list_display = ("provider_key", "count")
    search_fields = ("provider_key__exact",)
    search_help_text = "A provider key, exactly (charge-pay_… or refund-op_…)."
    ordering = ("provider_key",)
    list_per_page = 50
    show_full_result_count = False
