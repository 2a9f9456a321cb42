"""Admin for tenants, principals and their API tokens.

A token is issued only through a principal (on creation, or with the
"Issue a new API token" action) and shown once, in a message; the database
keeps only its digest, so nothing in the admin can show it again. Tokens
are never edited or deleted, only revoked, so the record of who held
access stays.
"""

from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils import timezone

from accounts.models import ApiToken, Principal, Tenant
from accounts.services import create_api_client


class ReadOnlyAdminMixin:
    """View-only pages: no add, change or delete, for ModelAdmins and inlines alike.

    Defined here because every other app depends on accounts, so they can
    all import it without depending on each other.
    """

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "created_at")
    search_fields = ("slug",)
    ordering = ("slug",)
    readonly_fields = ("created_at",)
    list_per_page = 100


class ApiTokenInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = ApiToken
    fields = ("prefix", "created_at", "revoked_at")
    readonly_fields = fields
    extra = 0
    ordering = ("-created_at",)
    show_change_link = True


def _issue_token(request: HttpRequest, principal: Principal) -> None:
    # Through the service, so the admin's tokens have the same format and
    # storage (digest only) as every other token. The message is the one
    # place the token ever appears: message storage drops it once shown.
    issued = create_api_client(tenant_slug=principal.tenant.slug, name=principal.name)
    messages.success(
        request,
        # The token comes last, so a double-click copies it and nothing else.
        f"New API token for {issued.principal}, shown only this once "
        f"(copy it now: only its digest is kept): {issued.token}",
    )


@admin.register(Principal)
class PrincipalAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "created_at")
    list_select_related = ("tenant",)
    search_fields = ("name", "tenant__slug")
    autocomplete_fields = ("tenant",)
    ordering = ("tenant__slug", "name")
    list_per_page = 100
    actions = ("issue_token",)

    def get_readonly_fields(
        self, request: HttpRequest, obj: Principal | None = None
    ) -> tuple[str, ...]:
        # Moving a principal to another tenant would carry its tokens into
        # that tenant's data: a new principal there is the way.
        return ("tenant", "created_at") if obj is not None else ()

    def get_inlines(
        self, request: HttpRequest, obj: Principal | None
    ) -> tuple[type[admin.TabularInline], ...]:
        # A principal being added has no tokens yet; leaving the inline out
        # also keeps its empty formset out of the add form.
        return (ApiTokenInline,) if obj is not None else ()

    def has_delete_permission(self, request: HttpRequest, obj: Principal | None = None) -> bool:
        # Deleting would cascade to its tokens and idempotency keys, erasing
        # the record of what it did; revoking its tokens ends its access.
        return False

    def save_model(
        self, request: HttpRequest, obj: Principal, form: ModelForm, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            # Inside the admin's transaction: the principal and its first
            # token commit together or not at all.
            _issue_token(request, obj)

    def has_issue_token_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("accounts.add_apitoken")

    @admin.action(description="Issue a new API token", permissions=["issue_token"])
    def issue_token(self, request: HttpRequest, queryset: QuerySet[Principal]) -> None:
        for principal in queryset.select_related("tenant"):
            _issue_token(request, principal)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens, by prefix. Issued through a principal; revoked, never edited or deleted."""

    list_display = ("prefix", "principal", "created_at", "revoked_at")
    list_select_related = ("principal__tenant",)
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("prefix", "principal__name", "principal__tenant__slug")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_per_page = 100
    # The digest is left out: it is of no use to a person, and no page needs
    # to hand out what a token is looked up by.
    fields = ("prefix", "principal", "created_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        # The model's change permission, not has_change_permission above,
        # which is False for everyone to keep the form read-only.
        return request.user.has_perm("accounts.change_apitoken")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        # Tokens already revoked keep the time they were first revoked.
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)
