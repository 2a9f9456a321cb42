"""The idempotency app's reads: the look-up of a key and the policy (§3 rules 11 and 15).

Their OpenAPI descriptions, as every other one of the app's, are in
idempotency/schema.py.
"""

from django.utils.cache import patch_cache_control
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from idempotency import published, selectors
from idempotency.schema import get_idempotency_key, get_idempotency_policy
from idempotency.serializers import IdempotencyKeyOutput, IdempotencyPolicyOutput


class IdempotencyKeyDetail(APIView):
    @get_idempotency_key
    def get(self, request: Request, key: str) -> Response:
        record = selectors.get_idempotency_key(principal=principal_of(request), key=key)
        return Response(IdempotencyKeyOutput(record).data)


class IdempotencyPolicy(APIView):
    # The same for every client, and what a client reads before it has a
    # token to send: no authentication, no principal to throttle, no database.
    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = ()

    @get_idempotency_policy
    def get(self, request: Request) -> Response:
        response = Response(IdempotencyPolicyOutput(published.document()).data)
        patch_cache_control(response, public=True, max_age=published.MAX_AGE_SECONDS)
        return response
