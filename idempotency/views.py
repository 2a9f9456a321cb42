"""The look-up of an idempotency key (docs/SPECIFICATION.md §3 rule 11): a read, not a command.

Its OpenAPI description, as every other one of the app's, is in
idempotency/schema.py (:data:`~idempotency.schema.get_idempotency_key`).
"""

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from idempotency import selectors
from idempotency.schema import get_idempotency_key
from idempotency.serializers import IdempotencyKeyOutput


class IdempotencyKeyDetail(APIView):
    @get_idempotency_key
    def get(self, request: Request, key: str) -> Response:
        record = selectors.get_idempotency_key(principal=principal_of(request), key=key)
        return Response(IdempotencyKeyOutput(record).data)
