from django.conf import settings
from django.contrib import admin
from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from api.converters import ResourceIdConverter
from observability import health
from observability.metrics import metrics_view

# Before the apps' URLs are included: they use it for every id in a path.
register_converter(ResourceIdConverter, "id")

urlpatterns = [
    path("v1/", include("orders.urls")),
    path("v1/", include("operations.urls")),
    path("v1/", include("idempotency.urls")),
    path("v1/", include("events.urls")),
    # Public, offline docs (SPECTACULAR_SETTINGS: no authentication, sidecar assets).
    path("v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]
if settings.ADMIN_ENABLED:
    urlpatterns.append(path("admin/", admin.site.urls))

handler400 = "api.errors.bad_request"
handler403 = "api.errors.permission_denied"
handler404 = "api.errors.page_not_found"
handler500 = "api.errors.server_error"
