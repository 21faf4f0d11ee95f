"""The browser tests' accounts and how a person signs in with them."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page

USERNAME = "root"
PASSWORD = "a-long-test-password"
VIEWER_NAME = "vera"  # a plain viewer (conftest.viewer_user); USERNAME is a superuser


def sign_in(page: Page, base_url: str, username: str = VIEWER_NAME) -> None:
    """Sign in through gpuplane's own page, as a person would, landing on the overview."""
    page.goto(f"{base_url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/")


def sign_in_as_staff(page: Page, base_url: str) -> None:
    """The Django admin's login page (staff only) gives a session the UI accepts too."""
    page.goto(f"{base_url}/admin/login/")
    page.get_by_label("Username").fill(USERNAME)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base_url}/admin/")
