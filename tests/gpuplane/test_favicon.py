"""The site's icon: linked from every page (base.html, the login page included) and served at
/favicon.ico for clients that ask for it without reading a page (the admin, the API docs)."""
from __future__ import annotations

import re

from django.test import Client


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_favicon_ico_is_served_at_the_site_root(db):
    response = Client().get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    assert body(response)[:4] == b"\x00\x00\x01\x00"  # ICO header: reserved 0, type 1 (icon)


def test_the_login_page_links_an_icon_that_is_served(db):
    page = Client().get("/accounts/login/").content.decode()

    hrefs = re.findall(r'<link rel="icon" href="([^"]+)"', page)
    assert hrefs, "no <link rel=icon> on the page"
    for href in hrefs:
        response = Client().get(href)
        assert response.status_code == 200, href
        assert response["Content-Type"].startswith("image/"), href


def test_a_signed_in_page_links_the_icon_too(viewer):
    client = Client()
    client.force_login(viewer)

    assert '<link rel="icon"' in client.get("/").content.decode()
