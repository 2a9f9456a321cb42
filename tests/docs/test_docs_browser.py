"""The docs pages in a real browser, served as deployed: offline, by gunicorn.

gunicorn with DEBUG off serves static files only through WhiteNoise after
``collectstatic``, so this is the one test that shows Swagger UI and Redoc
actually render from our own files and never call another host. It also
takes the README's picture of Swagger UI, docs/swagger-ui.png, when the
page's operations are no longer those the picture shows.
"""

import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from playwright.sync_api import Browser, Page, Request, Response, sync_playwright

from tests.docs.screenshot import (
    PICTURE,
    REFRESH,
    difference,
    operation_lines,
    operations_of,
    with_operations,
)
from tests.support import servers
from tests.support.live import LiveService, manage, serve, suite_database_env

# Narrower than the page fixture's: the README shows the picture about
# 900 pixels wide, and a summary taken at 1280 would be shrunk past reading.
PICTURE_WIDTH = 1024
# `make screenshot` sets it: take the picture again even when its operations
# are the page's (Swagger UI's look changed, or a summary's wording), and pass.
REFRESH_ASKED = os.environ.get("REFRESH_SCREENSHOT") == "1"
# Each operation block's head, as operation_lines writes a schema's operations.
OPERATION_HEADS = """blocks => blocks.map(block => [
    block.querySelector(".opblock-summary-method").textContent.trim().toUpperCase(),
    block.querySelector(".opblock-summary-path").dataset.path,
    block.querySelector(".opblock-summary-description")?.textContent.trim() ?? "",
].join(" ").trim())"""
# From the first tag's heading to the last operation, with a margin below as
# above it: the endpoints, not the API's description above them nor the
# schemas below.
OPERATIONS_BOX = """() => {
    const tags = [...document.querySelectorAll(".opblock-tag-section")];
    const first = tags[0].getBoundingClientRect(), last = tags.at(-1).getBoundingClientRect();
    return {top: first.top + window.scrollY, bottom: last.bottom + window.scrollY + 12};
}"""

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


def test_swagger_ui_renders_every_endpoint_offline(docs_service: LiveService, page: Page) -> None:
    traffic = Traffic(page)
    page.set_viewport_size({"width": PICTURE_WIDTH, "height": 900})

    page.goto(docs_service.url("/docs/"))
    page.wait_for_selector(".opblock", timeout=30_000)
    page.wait_for_load_state("networkidle")

    text = page.inner_text("#swagger-ui")
    assert "/v1/orders" in text
    assert "/v1/payments" in text
    assert "/v1/operations/{operationId}" in text
    assert "/v1/events" in text
    assert "/v1/webhook-endpoints/{endpointId}/deliveries" in text
    # One block per operation of the schema the page was served, headed by
    # its method, path and summary.
    schema = requests.get(docs_service.url("/v1/schema/?format=json"), timeout=10).json()
    shown = sorted(page.locator(".opblock").evaluate_all(OPERATION_HEADS))
    assert shown == operation_lines(schema)
    assert traffic.external == []
    assert traffic.blocked == []
    assert traffic.failures == []
    assert any(url.endswith("/v1/schema/") for url in traffic.urls)
    # Last, so that a page that renders wrong is never taken as the picture.
    _keep_the_picture_current(page, shown)


def _keep_the_picture_current(page: Page, shown: list[str]) -> None:
    """Take docs/swagger-ui.png again when it shows other operations than the page.

    The picture is rewritten, and the test fails: a developer's run leaves
    the new picture to commit, and CI, which runs on a fresh clone, fails on
    a stale one. Unchanged operations leave the file alone, so each run does
    not rewrite it with bytes that differ by a font's rounding.
    """
    kept = operations_of(PICTURE.read_bytes()) if PICTURE.exists() else None
    if kept == shown and not REFRESH_ASKED:
        return
    box = page.evaluate(OPERATIONS_BOX)
    taken = page.screenshot(
        full_page=True,
        clip={
            "x": 0,
            "y": box["top"],
            "width": PICTURE_WIDTH,
            "height": box["bottom"] - box["top"],
        },
    )
    PICTURE.write_bytes(with_operations(taken, shown))
    if not REFRESH_ASKED:
        pytest.fail(
            f"docs/swagger-ui.png was out of date ({difference(kept, shown)}) and has been"
            f" rewritten from the page: commit it (`{REFRESH}` takes it on purpose)"
        )


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
