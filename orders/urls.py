from django.urls import path

from orders import views

urlpatterns = [
    path("orders", views.OrderCollection.as_view(), name="orders"),
    path("orders/<str:order_id>", views.OrderDetail.as_view(), name="order"),
    path("orders/<str:order_id>/cancel", views.OrderCancel.as_view(), name="order-cancel"),
]
