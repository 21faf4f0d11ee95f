"""The savings page in a real browser, on the demo cluster: its headline numbers and per-model
rows equal GET /api/v1/savings/, the overview's savings block too, and the charts are drawn."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from nodes.demo import load_demo_cluster
from savings.services.history import record_sample
from tests.e2e.accounts import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HEADLINE = ("baseline_gpus", "gpus_used", "gpus_saved", "saved_percent", "usd_per_hour", "kwh_per_hour",
            "gpu_hours_saved_24h", "usd_saved_24h")


@pytest.fixture
def demo() -> None:
    """The demo cluster with two savings samples five minutes apart (so 24 h figures are not 0)."""
    load_demo_cluster()
    now = timezone.now()
    record_sample(now - timedelta(minutes=5))
    record_sample(now)


def shown(page: Page, scope: str, field: str) -> list[float]:
    return [float(text) for text in page.locator(f'{scope} [data-savings="{field}"]').all_inner_texts()]


def test_the_savings_page_shows_the_apis_numbers(page: Page, live_server, viewer_user, demo):
    base = live_server.url
    sign_in(page, base)
    api = page.request.get(f"{base}/api/v1/savings/").json()
    # The demo shares GPUs (MPS, MIG, time-slicing), so there is something saved to show.
    assert api["gpus_saved"] > 0 and api["gpu_hours_saved_24h"] == round(api["gpus_saved"] * 5 / 60, 2)

    # The overview's block first: the same headline.
    overview_block = '[data-card="savings"]'
    expect(page.locator(overview_block)).to_be_visible()
    for field in ("gpus_saved", "baseline_gpus", "saved_percent", "usd_per_hour", "kwh_per_hour"):
        assert shown(page, overview_block, field) == [api[field]], field

    page.get_by_role("link", name="Savings", exact=True).click()
    page.wait_for_url(f"{base}/savings/")
    for field in HEADLINE:
        values = shown(page, "main", field)
        assert values and all(value == api[field] for value in values), (field, values, api[field])
    for row in api["by_model"]:
        cells = page.locator(f'tr[data-model="{row["gpu_model"]}"]')
        for field in ("baseline_gpus", "gpus_used", "gpus_saved", "usd_per_hour", "kwh_per_hour"):
            assert float(cells.locator(f'[data-field="{field}"]').inner_text()) == row[field], (row["gpu_model"], field)
    # plotly drew the charts (it marks a drawn chart's element with this class).
    for chart in ("#savings-model-chart", "#savings-gpus-chart", "#savings-cost-chart"):
        expect(page.locator(chart)).to_have_class("chart js-plotly-plot")
