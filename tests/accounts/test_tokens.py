"""API tokens: issued once, stored as a digest, rotated by revoking the earlier ones."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from accounts.models import ApiToken


def _status_with(token: str) -> int:
    return Client().get("/v1/orders", headers={"Authorization": f"Bearer {token}"}).status_code


def _issue(*options: str) -> str:
    out = StringIO()
    call_command("create_api_client", "demo", "demo", *options, stdout=out, stderr=StringIO())
    return out.getvalue().splitlines()[-1]


@pytest.mark.django_db
def test_a_new_token_leaves_the_earlier_ones_valid() -> None:
    first, second = _issue(), _issue()

    assert (_status_with(first), _status_with(second)) == (200, 200)


@pytest.mark.django_db
def test_revoke_earlier_rotates_the_token() -> None:
    first = _issue()
    second = _issue("--revoke-earlier")

    assert _status_with(first) == 401
    assert _status_with(second) == 200
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 1
    # Only the digest is kept, of the new token as of the old.
    assert not ApiToken.objects.filter(digest__in=[first, second]).exists()
