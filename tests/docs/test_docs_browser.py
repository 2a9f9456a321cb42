"""The docs pages in a real browser, served as deployed: offline, by gunicorn.

gunicorn with DEBUG off serves static files only through WhiteNoise after
``collectstatic``, so this is the one test that shows Swagger UI and Redoc
actually render from our own files and never call another host.
"""

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from playwright.sync_api import Browser, Page, Request, Response, sync_playwright

from tests.support import servers
from tests.support.live import LiveService, manage, serve, suite_database_env

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}

CHROMIUM = Path("/usr/bin/chromium")
# Debian's chromium, headless, with everything that would phone home off.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


@pytest.fixture(scope="module")
def docs_service(django_db_setup: None) -> Iterator[LiveService]:
    env = suite_database_env(DEBUG="0")
    # Into the project's staticfiles/ (gitignored): gunicorn reads STATIC_ROOT
    # from the settings module, which has no other place for it.
    manage("collectstatic", "--noinput", "-v0", env=env)
    with serve(env, web_workers=1) as service:
        yield service


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "apt-get install -y chromium (see .ci/run)"
    # Playwright drives the system's chromium; it never downloads a browser.
    # Its log is one a failure shows the end of (tests/support/servers.py).
    with servers.workspace("chromium-") as logs, sync_playwright() as playwright:
        log = logs / "chromium.log"
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[*CHROMIUM_ARGS, "--enable-logging", f"--log-file={log}"],
        )
        chromium = servers.watch(
            "chromium (Playwright's)",
            None,
            [log],
            state=lambda: "connected" if browser.is_connected() else "disconnected",
        )
        yield browser
        browser.close()
        servers.forget(chromium)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


class Traffic:
    """Every request a page makes, what the browser blocked, and what failed."""

    def __init__(self, page: Page) -> None:
        self.urls: list[str] = []
        self.blocked: list[str] = []
        self.failures: list[str] = []
        page.on("request", lambda request: self.urls.append(request.url))
        page.on("response", self._on_response)
        page.on("requestfailed", self._on_failure)

    def _on_response(self, response: Response) -> None:
        if response.status >= 400:
            self.failures.append(f"{response.status} {response.url}")

    def _on_failure(self, request: Request) -> None:
        # Refused by the page's own Content-Security-Policy: it never left the browser.
        if "csp" in (request.failure or "").lower():
            self.blocked.append(request.url)
        else:
            self.failures.append(f"{request.failure} {request.url}")

    @property
    def external(self) -> list[str]:
        """Requests that went to another host (data: and blob: are the page's own memory)."""
        return [
            url
            for url in self.urls
            if urlsplit(url).scheme in ("http", "https", "ws", "wss")
            and urlsplit(url).hostname not in LOCAL_HOSTS
            and url not in self.blocked
        ]


def test_swagger_ui_renders_every_endpoint_offline(
    docs_service: LiveService, page: Page, tmp_path: Path
) -> None:
    traffic = Traffic(page)

    page.goto(docs_service.url("/docs/"))
    page.wait_for_selector(".opblock", timeout=30_000)
    page.wait_for_load_state("networkidle")
    # The endpoints, not the API description above them, make the picture.
    # It is taken in the test's own directory, never over the README's
    # docs/swagger-ui.png: to refresh that one, run this test with
    # --basetemp=DIR and copy DIR/test_swagger_ui_renders_every_0/swagger-ui.png.
    page.locator("#operations-tag-orders").evaluate("tag => tag.scrollIntoView()")
    page.screenshot(path=str(tmp_path / "swagger-ui.png"))

    text = page.inner_text("#swagger-ui")
    assert "/v1/orders" in text
    assert "/v1/payments" in text
    assert "/v1/operations/{operationId}" in text
    assert "/v1/events" in text
    assert "/v1/webhook-endpoints/{endpointId}/deliveries" in text
    # One block per operation of the schema the page was served.
    schema = requests.get(docs_service.url("/v1/schema/?format=json"), timeout=10).json()
    operations = [m for item in schema["paths"].values() for m in item if m in HTTP_METHODS]
    assert page.locator(".opblock").count() == len(operations) > 16
    assert traffic.external == []
    assert traffic.blocked == []
    assert traffic.failures == []
    assert any(url.endswith("/v1/schema/") for url in traffic.urls)


def test_redoc_renders_offline(docs_service: LiveService, page: Page) -> None:
    traffic = Traffic(page)

    page.goto(docs_service.url("/redoc/"))
    page.get_by_role("heading", name=re.compile(r"Place an order$")).wait_for(timeout=30_000)
    page.wait_for_load_state("networkidle")

    assert "Idempotency-Key" in page.inner_text("body")
    # Redoc's bundle always tries its CDN logo; our template's policy blocks it.
    assert traffic.external == []
    assert {urlsplit(url).hostname for url in traffic.blocked} <= {"cdn.redoc.ly"}
    assert traffic.failures == []
