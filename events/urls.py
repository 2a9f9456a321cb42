from django.urls import path

from events import views

urlpatterns = [
    path("events", views.EventCollection.as_view(), name="events"),
    path("events/<id:event_id>", views.EventDetail.as_view(), name="event"),
    path("webhook-endpoints", views.WebhookEndpointCollection.as_view(), name="webhook-endpoints"),
    path(
        "webhook-endpoints/<id:endpoint_id>",
        views.WebhookEndpointDetail.as_view(),
        name="webhook-endpoint",
    ),
    path(
        "webhook-endpoints/<id:endpoint_id>/deliveries",
        views.WebhookDeliveries.as_view(),
        name="webhook-deliveries",
    ),
]
