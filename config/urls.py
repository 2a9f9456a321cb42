from django.contrib import admin
from django.urls import include, path

from config import health
from config.metrics import metrics_view

urlpatterns = [
    path("v1/", include("orders.urls")),
    path("v1/", include("operations.urls")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
]

handler400 = "config.exceptions.bad_request"
handler403 = "config.exceptions.permission_denied"
handler404 = "config.exceptions.page_not_found"
handler500 = "config.exceptions.server_error"
