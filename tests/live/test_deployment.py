"""What a deployment relies on: the checks CI runs and the production settings."""

import subprocess
import sys

import pytest
from django.core.management import call_command

from tests.support.live import ROOT, base_env

PRODUCTION_ENV = {
    "SECRET_KEY": "a-production-secret-that-is-long-and-random-enough-0123456789abcdef",
    "ALLOWED_HOSTS": "orders.example.com",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
}


def manage_py(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base_env(**env),
        capture_output=True,
        text=True,
        check=False,
    )


def test_migrations_match_the_models(db: None) -> None:
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_the_production_settings_pass_the_deployment_checks() -> None:
    result = manage_py("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION_ENV)

    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_debug_is_off_unless_asked_for() -> None:
    show_debug = (
        "shell",
        "--no-imports",
        "-c",
        "from django.conf import settings; print(settings.DEBUG)",
    )

    assert manage_py(*show_debug, **PRODUCTION_ENV).stdout.strip() == "False"
    assert manage_py(*show_debug, **PRODUCTION_ENV, DEBUG="true").stdout.strip() == "True"


@pytest.mark.django_db
def test_seeding_the_catalog_twice_is_safe() -> None:
    from orders.models import Product

    call_command("seed_demo", verbosity=0)
    call_command("seed_demo", verbosity=0)

    assert sorted(Product.objects.values_list("sku", "unit_price", "currency")) == [
        ("ABC", 1990, "RUB"),
        ("USD1", 1200, "USD"),
        ("XYZ", 50000, "RUB"),
    ]


def test_create_api_client_prints_the_token_last(db: None) -> None:
    from io import StringIO

    from accounts.models import ApiToken

    out = StringIO()
    call_command("create_api_client", "acme", "ci", stdout=out, stderr=StringIO())

    token = out.getvalue().strip().splitlines()[-1]
    assert token.startswith("osk_")
    assert ApiToken.objects.filter(digest=ApiToken.digest_of(token)).exists()
    assert not ApiToken.objects.filter(digest=token).exists()
