from django.urls import path

from idempotency import views

urlpatterns = [
    path("idempotency-policy", views.IdempotencyPolicy.as_view(), name="idempotency-policy"),
    # `path`, not `id`: a key may hold `/`, which arrives decoded from `%2F`
    # before routing, so the key is the whole rest of the path.
    path(
        "idempotency-keys/<path:key>", views.IdempotencyKeyDetail.as_view(), name="idempotency-key"
    ),
]
