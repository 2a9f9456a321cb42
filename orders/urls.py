from django.urls import path

from orders import views

urlpatterns = [
    path("orders", views.OrderCollection.as_view(), name="orders"),
    # Any segment: the view tells an id a client may choose from one it may not.
    path("orders/<str:order_id>", views.OrderDetail.as_view(), name="order"),
    path("orders/<id:order_id>/cancel", views.OrderCancel.as_view(), name="order-cancel"),
    path("payments", views.PaymentCollection.as_view(), name="payments"),
    path("payments/<id:payment_id>", views.PaymentDetail.as_view(), name="payment"),
]
