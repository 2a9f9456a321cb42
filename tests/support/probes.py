"""Commands that exist only in tests, behind the real idempotency layer.

They give the tests a handle the real endpoints do not: a command that
fails in its own code after writing, one under which the database fails,
one that runs until the test lets it finish, and one whose answer is too
large to store.
"""

import os
import threading

from django.db import connection
from django.urls import include, path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from idempotency.commands import MAX_STORED_RESPONSE_BYTES, idempotent_command
from orders.models import Order

# Set by a test to make the next database-failure command fail.
database_failures_left = threading.Event()
# Set by a test to let the slow command finish; the command sets `started`.
slow_command_started = threading.Event()
slow_command_release = threading.Event()


def _write_order(request: Request) -> Order:
    return Order.objects.create(
        tenant=principal_of(request).tenant, customer_id="probe", currency="RUB", total_amount=1
    )


class FailingCommand(APIView):
    @idempotent_command
    def post(self, request: Request) -> Response:
        _write_order(request)
        raise RuntimeError("a bug in the command's own code")


class DatabaseFailureCommand(APIView):
    @idempotent_command
    def post(self, request: Request) -> Response:
        order = _write_order(request)
        if database_failures_left.is_set():
            database_failures_left.clear()
            with connection.cursor() as cursor:
                # A real failure of the database under the command: the
                # statement is cancelled by its timeout.
                cursor.execute("SET LOCAL statement_timeout = 1")
                cursor.execute("SELECT pg_sleep(1)")
        return Response({"orderId": order.id}, status=201)


class StuckCommand(APIView):
    @idempotent_command
    def post(self, request: Request) -> Response:
        order = _write_order(request)
        if seconds := os.environ.get("PROBE_STUCK_SECONDS"):
            with connection.cursor() as cursor:
                # A statement that does not end: the process is alive and busy.
                cursor.execute("SELECT pg_sleep(%s)", [float(seconds)])
        return Response({"orderId": order.id}, status=201)


class OversizedAnswerCommand(APIView):
    @idempotent_command
    def post(self, request: Request) -> Response:
        _write_order(request)
        return Response({"padding": "x" * MAX_STORED_RESPONSE_BYTES}, status=201)


class TwoMethodCommand(APIView):
    @idempotent_command
    def post(self, request: Request) -> Response:
        return Response({"method": "POST"}, status=201)

    @idempotent_command
    def delete(self, request: Request) -> Response:
        return Response({"method": "DELETE"}, status=200)


class SlowCommand(APIView):
    @idempotent_command
    def post(self, request: Request) -> Response:
        order = _write_order(request)
        slow_command_started.set()
        slow_command_release.wait(timeout=30)
        return Response({"orderId": order.id}, status=201)


urlpatterns = [
    path("v1/probes/failing", FailingCommand.as_view()),
    path("v1/probes/database-failure", DatabaseFailureCommand.as_view()),
    path("v1/probes/slow", SlowCommand.as_view()),
    path("v1/probes/stuck", StuckCommand.as_view()),
    path("v1/probes/two-methods", TwoMethodCommand.as_view()),
    path("v1/probes/oversized-answer", OversizedAnswerCommand.as_view()),
    path("", include("config.urls")),
]
