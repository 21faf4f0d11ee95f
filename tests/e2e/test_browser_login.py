"""The sign-in page in a real browser, as a signed-out visitor sees it.

It promises only what gpuplane does (no rollouts, plans or policies yet), links nowhere that
would bounce back to itself, and its fields sit together: no field is taller than its label
and input need. Screenshot in the test's tmp_path (login.png).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.accounts import VIEWER_NAME, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_login_page_is_compact_and_promises_only_what_exists(page: Page, live_server, tmp_path: Path,
                                                                  viewer_user: User) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.screenshot(path=str(tmp_path / "login.png"), full_page=True)

    expect(page.get_by_role("heading", name="Sign in to gpuplane")).to_be_visible()
    text = page.locator("main").inner_text().lower()
    for promise in (r"\brollouts?\b", r"\bapprove\b", r"\bpolic(y|ies)\b", r"\bplans?\b"):
        assert not re.search(promise, text), f"the page promises {promise!r}, which gpuplane does not have"
    # Signed out, the navigation would only lead back here.
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes")).to_have_count(0)

    # Each field is just its label and input (plus a small gap); the button follows closely.
    fields = page.locator(".login-form .field")
    expect(fields).to_have_count(2)
    for index in range(2):
        field = fields.nth(index)
        box, label, control = (el.bounding_box() for el in (field, field.locator("label"), field.locator("input")))
        assert box and label and control
        assert box["height"] <= label["height"] + control["height"] + 16, f"field {index} has an empty gap: {box}"
    username = page.get_by_label("Username").bounding_box()
    button = page.get_by_role("button", name="Sign in").bounding_box()
    assert username and button
    assert button["y"] - (username["y"] + username["height"]) < 150

    sign_in(page, live_server.url, VIEWER_NAME)
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes")).to_be_visible()
