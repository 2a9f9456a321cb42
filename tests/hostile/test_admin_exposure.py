"""The admin's login page is not an open door on the API's port.

It can be switched off (``ADMIN_ENABLED``; docker-compose.yml keeps it off
unless asked), nginx does not pass it on unless asked
(``NGINX_FORWARD_ADMIN``), its login locks an address out after five wrong passwords,
and the headers a proxy sets are believed only when a proxy sets them
(``BEHIND_PROXY``): facing clients directly, a client could claim HTTPS or
another address to dodge the lockout.
"""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.test import Client
from pytest_django import Settings

from tests.support.edge import nginx, raw_exchange
from tests.support.live import ROOT, LiveService, base_env, serve, suite_database_env

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


# --- at the edge ------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin_app(django_db_setup: None) -> Iterator[LiveService]:
    """gunicorn with the admin on (the app's default)."""
    with serve(suite_database_env(), web_workers=1) as app:
        yield app


def raw_get(edge: LiveService, target: str) -> tuple[int, dict[str, str], bytes]:
    response = raw_exchange(edge, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return response.status, response.headers, response.body


ADMIN_PATHS = ["/admin/", "/admin", "/admin/login/", "/%61dmin/login/", "//admin/login/"]


@pytest.mark.parametrize("setting", [None, "false"], ids=["unset", "false"])
def test_nginx_does_not_pass_the_admin_on_unless_asked(
    admin_app: LiveService, tmp_path: Path, setting: str | None
) -> None:
    variables = {} if setting is None else {"NGINX_FORWARD_ADMIN": setting}
    upstream = admin_app.base_url.removeprefix("http://")

    with nginx(upstream, tmp_path, variables=variables) as edge:
        answers = {path: raw_get(edge, path) for path in ADMIN_PATHS}
        healthz = raw_get(edge, "/healthz")

    for path, (status, headers, body) in answers.items():
        assert status == 404, path
        assert headers["content-type"] == "application/problem+json", path
        assert json.loads(body)["error"] == "NotFound", path
    assert healthz[0] == 200
    # The app itself still has it, on the internal network.
    assert raw_get(admin_app, "/admin/")[0] == 302


def test_nginx_passes_the_admin_on_when_asked(admin_app: LiveService, tmp_path: Path) -> None:
    upstream = admin_app.base_url.removeprefix("http://")

    with nginx(upstream, tmp_path, variables={"NGINX_FORWARD_ADMIN": "true"}) as edge:
        status, headers, _ = raw_get(edge, "/admin/")

    assert status == 302
    assert headers["location"].startswith("/admin/login/")
