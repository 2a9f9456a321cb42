from django.urls import path

from orders import views

urlpatterns = [
    path("orders", views.OrderCollection.as_view(), name="orders"),
    path("orders/<str:order_id>", views.OrderDetail.as_view(), name="order"),
    path("orders/<str:order_id>/cancel", views.OrderCancel.as_view(), name="order-cancel"),
    path("payments", views.PaymentCollection.as_view(), name="payments"),
    path("payments/<str:payment_id>", views.PaymentDetail.as_view(), name="payment"),
]
