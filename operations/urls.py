from django.urls import path

from operations import views

urlpatterns = [
    path("operations/<id:operation_id>", views.OperationDetail.as_view(), name="operation"),
]
