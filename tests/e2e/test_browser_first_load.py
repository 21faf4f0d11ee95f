"""The first overview load after signing in transfers less than 1.5 MB, cache empty.

Served as gpuplane serves it: static files collected (hashed names, .br and .gz beside them, as
`make run` and the image collect them) and served by whitenoise in the application, not by the
test server's own static handler. Chromium reports every response's encoded size (headers and
body as they crossed the wire); plotly.js alone is 4.8 MB uncompressed.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections
from django.test.testcases import LiveServerThread
from playwright.sync_api import Page

from tests.e2e.accounts import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BUDGET_BYTES = 1_500_000


@pytest.fixture
def app_server(settings, tmp_path: Path) -> Iterator[str]:
    """The application on a live server thread, static files through whitenoise from a fresh collect."""
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", "--noinput", verbosity=0)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "127.0.0.1"]
    shared = {c.alias: c for c in connections.all() if c.vendor == "sqlite" and c.is_in_memory_db()}
    # No static handler of the test server's own: /static/ reaches whitenoise, as under gunicorn.
    thread = LiveServerThread("127.0.0.1", static_handler=lambda application: application, connections_override=shared)
    thread.daemon = True
    for connection in shared.values():
        connection.inc_thread_sharing()
    thread.start()
    thread.is_ready.wait()
    try:
        assert thread.error is None, thread.error
        yield f"http://127.0.0.1:{thread.port}"
    finally:
        thread.terminate()
        for connection in shared.values():
            connection.dec_thread_sharing()


def test_the_first_overview_load_after_sign_in_transfers_under_1_5_mb(app_server: str, page: Page, viewer_user,
                                                                       settings, tmp_path: Path) -> None:
    # What a new user sees first: the demo cluster `make run` loads, its charts drawn by plotly.js.
    settings.GPUPLANE_SIMULATED_STATE = str(tmp_path / "cluster.sqlite3")
    call_command("load_demo_cluster", "--if-empty", verbosity=0)
    sign_in(page, app_server)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.clearBrowserCache")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})  # nothing from the sign-in page's visit
    urls: dict[str, str] = {}
    encoded: dict[str, int] = {}
    decoded: dict[str, int] = {}
    headers: dict[str, dict[str, str]] = {}
    cdp.on("Network.requestWillBeSent", lambda e: urls.__setitem__(e["requestId"], e["request"]["url"]))
    cdp.on("Network.responseReceived", lambda e: headers.__setitem__(
        e["requestId"], {k.lower(): v for k, v in e["response"]["headers"].items()}))
    cdp.on("Network.dataReceived", lambda e: decoded.__setitem__(
        e["requestId"], decoded.get(e["requestId"], 0) + e["dataLength"]))
    cdp.on("Network.loadingFinished", lambda e: encoded.__setitem__(e["requestId"], e["encodedDataLength"]))

    page.goto(f"{app_server}/", wait_until="load")
    page.wait_for_load_state("networkidle")

    assert set(encoded) == set(urls), "a request did not finish"
    by_url = {urls[rid]: (encoded[rid], decoded.get(rid, 0), headers.get(rid, {})) for rid in urls}
    plotlys = [url for url in by_url if "/static/vendor/plotly/plotly.min." in url]
    assert len(plotlys) == 1, by_url
    (plotly,) = plotlys
    transferred, body, plotly_headers = by_url[plotly]
    assert plotly_headers.get("content-encoding") in ("br", "gzip"), plotly_headers
    assert "immutable" in plotly_headers["cache-control"]  # hashed name: cached for good after this load
    assert body > 4_500_000  # the budget bounds something real: uncompressed, plotly alone would burst it
    total = sum(size for size, _, _ in by_url.values())
    print(f"first overview load: {len(by_url)} requests, {total:,} bytes transferred "
          f"({sum(d for _, d, _ in by_url.values()):,} decoded); plotly.js {transferred:,}")
    assert total < BUDGET_BYTES, {url: size for url, (size, _, _) in by_url.items()}
