"""Admin for operations: the outbox and the status clients poll."""

from django.contrib import admin

from accounts.admin import ReadOnlyAdminMixin
from operations.models import Operation


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Operations, read-only.

    Workers and the sweep coordinate through this row alone: ``status`` only
    moves forward and every write of it is a compare-and-set on
    ``status='processing'``, paired with the payment or order it settles. A
    form save would overwrite the row whole, racing a worker's claim and
    breaking that pairing, and clients would poll an outcome that never
    happened.
    """

    list_display = (
        "id",
        "kind",
        "status",
        "tenant",
        "result_id",
        "attempts",
        "publications",
        "error_code",
        "created_at",
        "updated_at",
    )
    list_select_related = ("tenant",)
    list_filter = ("status", "kind")
    # Exact matches: an id is a primary key lookup, where a substring search
    # would scan the whole table.
    search_fields = ("id__exact", "result_id__exact")
    search_help_text = "An operation id, or the payment or order id it works on, exactly."
    ordering = ("-created_at",)
    list_per_page = 50
    # A big table: a filtered page need not also count every row of it for
    # "N total". No date_hierarchy either: it reads the table's distinct dates.
    show_full_result_count = False
