"""The savings page, the overview's savings block and /metrics show the API's numbers."""
from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.savings.cluster import EXPECTED, build_cluster

pytestmark = pytest.mark.django_db
# Every headline figure the pages mark: <... data-savings="field">value</...> (or a span inside).
_MARKED = re.compile(r'data-savings="(\w+)">([^<]*)<')


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def _marked(html: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for field, text in _MARKED.findall(html):
        found.setdefault(field, []).append(text.strip())
    return found


def _assert_agrees(marked: dict[str, list[str]], api: dict, fields: set[str]) -> None:
    assert fields <= set(marked), f"not shown: {fields - set(marked)}"
    for field in fields:
        for text in marked[field]:
            assert float(text) == api[field], (field, text, api[field])


def test_every_number_on_the_savings_page_equals_the_api(viewer_client, viewer_api):
    build_cluster()
    api = viewer_api.get("/api/v1/savings/").json()
    response = viewer_client.get("/savings/")
    assert response.status_code == 200
    html = response.content.decode()
    numeric = {k for k, v in api.items() if isinstance(v, int | float) and k != "sample_interval_s"}
    _assert_agrees(_marked(html), api, numeric)
    assert {k: api[k] for k in EXPECTED} == EXPECTED  # and they are the cluster's figures
    # The per-model table and the charts' data are the API's rows.
    for row in api["by_model"]:
        cells = re.search(rf'<tr data-model="{row["gpu_model"]}">(.*?)</tr>', html, re.S)
        assert cells is not None
        shown = dict(re.findall(r'data-field="(\w+)">([^<]*)<', cells.group(1)))
        assert {k: float(v) for k, v in shown.items()} == {k: row[k] for k in shown}
    chart_data = json.loads(re.search(r'id="savings-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert chart_data["by_model"] == api["by_model"]
    assert 'src="/static/js/savings.js"' in html


def test_the_overview_shows_the_savings_headline_of_the_api(viewer_client, viewer_api):
    build_cluster()
    api = viewer_api.get("/api/v1/savings/").json()
    response = viewer_client.get("/")
    # The allocation the savings count is the overview's own total, in GPU-equivalents.
    assert float(response.context["overview"].allocated_gpu_equivalents) == api["allocated_gpu_equivalents"] == 4.11
    html = response.content.decode()
    block = re.search(r'data-card="savings">(.*?)</section>', html, re.S)
    assert block is not None
    _assert_agrees(_marked(block.group(1)), api,
                   {"gpus_saved", "baseline_gpus", "saved_percent", "gpus_used", "usd_per_hour", "kwh_per_hour",
                    "gpu_hours_saved_24h", "usd_saved_24h"})


def test_the_savings_page_is_in_the_navigation_and_needs_a_role(viewer_client, outsider):
    html = viewer_client.get("/").content.decode()
    assert 'href="/savings/"' in html
    assert Client().get("/savings/").status_code == 302  # to the sign-in page
    client = Client()
    client.force_login(outsider)
    assert client.get("/savings/").status_code == 403


def test_the_metrics_gauges_equal_the_api(client, viewer_api):
    build_cluster()
    api = viewer_api.get("/api/v1/savings/").json()
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(client.get("/metrics").content.decode())
        for sample in family.samples
    }
    assert samples["gpuplane_savings_gpus"] == api["gpus_saved"] == 4
    assert round(samples["gpuplane_savings_usd_per_hour"], 2) == api["usd_per_hour"]
    assert round(samples["gpuplane_savings_kwh_per_hour"], 3) == api["kwh_per_hour"]
