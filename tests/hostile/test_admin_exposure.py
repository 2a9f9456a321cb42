"""The admin's login page is not an open door on the API's port.

It can be switched off (``ADMIN_ENABLED``; docker-compose.yml keeps it off
unless asked), its login locks an address out after five wrong passwords,
and the headers a proxy sets are believed only when a proxy sets them
(``BEHIND_PROXY``): facing clients directly, a client could claim HTTPS or
another address to dodge the lockout.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.test import Client
from pytest_django import Settings

from tests.support.live import ROOT, base_env

PASSWORD = "correct horse battery staple"


def in_a_fresh_process(code: str, tmp_path: Path, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=ROOT,
        env=base_env(VAR_DIR=str(tmp_path), **env),
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


# Whether the URL of the admin's login resolves to a view.
ADMIN_LOGIN_ROUTED = (
    "from django.urls import Resolver404, resolve\n"
    "try:\n    print(resolve('/admin/login/').view_name)\n"
    "except Resolver404:\n    print('none')"
)

PROXY_SSL_HEADER = "from django.conf import settings; print(settings.SECURE_PROXY_SSL_HEADER)"


def test_the_admin_can_be_switched_off(tmp_path: Path) -> None:
    assert in_a_fresh_process(ADMIN_LOGIN_ROUTED, tmp_path) == "admin:login"
    assert in_a_fresh_process(ADMIN_LOGIN_ROUTED, tmp_path, ADMIN_ENABLED="false") == "none"


def test_x_forwarded_proto_is_believed_only_behind_a_proxy(tmp_path: Path) -> None:
    assert in_a_fresh_process(PROXY_SSL_HEADER, tmp_path) == "None"
    assert in_a_fresh_process(PROXY_SSL_HEADER, tmp_path, BEHIND_PROXY="true") == (
        "('HTTP_X_FORWARDED_PROTO', 'https')"
    )


@pytest.fixture(autouse=True)
def plain_static_files(settings: Settings) -> None:
    # The login page links the admin's CSS; the manifest storage would need a
    # collectstatic first, which these tests have no use for.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def administrator(db: None) -> AbstractBaseUser:
    return get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)


def log_in(client: Client, password: str, **headers: str) -> int:
    response = client.post(
        "/admin/login/?next=/admin/",
        {"username": "root", "password": password},
        headers=headers,
    )
    return response.status_code


def test_five_wrong_passwords_lock_the_address_out(administrator: AbstractBaseUser) -> None:
    client = Client()

    failures = [log_in(client, "guess") for _ in range(5)]
    locked_out = log_in(client, PASSWORD)

    # The form again, with its error; the fifth failure locks the address out.
    assert failures == [200, 200, 200, 200, 429]
    assert locked_out == 429


def test_a_forged_forwarded_address_does_not_dodge_the_lockout(
    administrator: AbstractBaseUser,
) -> None:
    client = Client()

    for i in range(5):
        log_in(client, "guess", **{"X-Forwarded-For": f"203.0.113.{i}"})

    assert log_in(client, PASSWORD, **{"X-Forwarded-For": "203.0.113.99"}) == 429


def test_behind_a_proxy_the_lockout_is_per_client_address(
    administrator: AbstractBaseUser, settings: Settings
) -> None:
    settings.BEHIND_PROXY = True
    client = Client()

    for _ in range(5):
        log_in(client, "guess", **{"X-Forwarded-For": "203.0.113.7"})

    assert log_in(client, PASSWORD, **{"X-Forwarded-For": "203.0.113.7"}) == 429
    assert log_in(client, PASSWORD, **{"X-Forwarded-For": "198.51.100.1"}) == 302
