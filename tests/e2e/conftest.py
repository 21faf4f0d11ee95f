"""Browser fixtures: Debian's Chromium driven by Playwright's sync API against pytest-django's live_server."""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import Group, User

from tests.e2e.accounts import PASSWORD, VIEWER_NAME

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# Playwright's sync API runs an event loop in the test thread; Django would then refuse ORM calls
# made by the test itself (SynchronousOnlyOperation). The test thread only builds fixtures, so the
# unsafe flag is acceptable here, as Django's and Playwright's docs recommend for tests.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def require_chromium(executable: Path, environ: Mapping[str, str]) -> None:
    """Skip the browser tests where Chromium is absent, except in CI (CI=true), where that fails the run."""
    if executable.exists():
        return
    if environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"CI=true but {executable} is missing: the browser tests cannot run (.ci/run installs chromium)",
                    pytrace=False)
    pytest.skip("Debian chromium not installed (apt-get install chromium); .ci/run installs it")


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    """One headless Chromium for the session; tests skip where Debian's Chromium is absent (fail in CI)."""
    require_chromium(CHROMIUM, os.environ)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) and page per test, sized like a laptop screen."""
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def viewer_user() -> User:
    """A plain viewer: not staff, so only the gpuplane sign-in page lets her in."""
    user = User.objects.create_user(VIEWER_NAME, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    return user
