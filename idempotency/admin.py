"""Admin for idempotency keys: what each command was asked and what it answered."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from accounts.admin import ReadOnlyAdminMixin
from idempotency.models import IdempotencyKey

# How much of a stored response body the detail page shows (bytes). Enough
# for any single-resource answer; a bigger body is cut rather than rendered
# whole into the page.
RESPONSE_BODY_PREVIEW_BYTES = 10 * 1024


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Idempotency keys, read-only and never deleted here.

    A stored response is replayed byte for byte to every retry of its key,
    so editing one would change the answer a client already relied on.
    Deleting a live key would let a retry run its command a second time;
    keys go only when the purge task finds them past their retention.
    """

    list_display = (
        "key",
        "principal",
        "request_method",
        "request_path",
        "response_status",
        "created_at",
        "expires_at",
    )
    list_select_related = ("principal__tenant", "answer")
    # Exact: the key is pasted whole, and a substring search would scan the
    # table. No list_filter: on plain columns it reads every distinct value.
    search_fields = ("key__exact",)
    search_help_text = "An Idempotency-Key, exactly."
    # Newest first through the expires_at index: every key expires a fixed
    # TTL after it was created, so this is creation order without a sort of
    # the whole table.
    ordering = ("-expires_at",)
    list_per_page = 50
    # A big table: a searched page need not also count every row of it.
    show_full_result_count = False
    fields = (
        "tenant",
        "principal",
        "key",
        "request_method",
        "request_path",
        "fingerprint",
        "field_digests",
        "response_status",
        "response_headers",
        "response_body_text",
        "created_at",
        "expires_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[IdempotencyKey]:
        # The answer is a row of its own (StoredAnswer): read with its key.
        return super().get_queryset(request).select_related("answer")

    @admin.display(description="Response status")
    def response_status(self, obj: IdempotencyKey) -> int:
        return obj.answer.status

    @admin.display(description="Response headers")
    def response_headers(self, obj: IdempotencyKey) -> dict[str, str]:
        headers: dict[str, str] = obj.answer.headers
        return headers

    @admin.display(description="Response body")
    def response_body_text(self, obj: IdempotencyKey) -> str:
        """The stored body as text, cut at ``RESPONSE_BODY_PREVIEW_BYTES``."""
        body = bytes(obj.answer.body)
        # errors="replace": a cut may split a UTF-8 sequence, and a body need
        # not be text at all; the page must render either way.
        text = body[:RESPONSE_BODY_PREVIEW_BYTES].decode("utf-8", errors="replace")
        if len(body) > RESPONSE_BODY_PREVIEW_BYTES:
            text += f"\n… (first {RESPONSE_BODY_PREVIEW_BYTES} of {len(body)} bytes)"
        return format_html('<pre style="white-space: pre-wrap">{}</pre>', text)
