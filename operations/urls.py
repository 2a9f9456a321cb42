from django.urls import path

from operations import views

urlpatterns = [
    path("operations/<str:operation_id>", views.OperationDetail.as_view(), name="operation"),
]
