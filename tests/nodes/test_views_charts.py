"""Chart markup on the pages: node detail's Telemetry section, the GPU page, the overview heatmap,
and plotly.js served by gpuplane itself from the installed plotly package."""
from __future__ import annotations

import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.utils import timezone

from nodes.models import GPU
from nodes.vocabulary import PartitionKind, SharingMode
from tests.nodes.factories import make_node, make_partition
from tests.nodes.test_views import elements

pytestmark = pytest.mark.django_db

PLOTLY = "/static/vendor/plotly/plotly.min.js"
CHARTS = "/static/js/charts.js"
EMPTY = "No telemetry yet — samples arrive every 30 s"


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def nodes() -> None:
    """`h.example.com`: 2 GPUs, GPU 1 reporting; `quiet`: 1 MIG GPU, never reported."""
    make_node("h.example.com")
    GPU.objects.filter(uuid="GPU-h.example.com-1").update(
        utilization_pct=64.0, memory_used_mib=40960, power_w=512.0, temperature_c=66.0, sampled_at=timezone.now()
    )
    quiet = make_node("quiet", gpu_count=1, sharing_mode=SharingMode.MIG, partitions=False)
    gpu = quiet.gpus.get()
    gpu.mig_enabled = True
    gpu.save()
    make_partition(gpu, PartitionKind.MIG, 0, 428, 40960, mig_profile="3g.40gb", mig_start=0, mig_size=4, pod="ml/x-0")


def scripts(html: str) -> list[str]:
    return re.findall(r'<script src="([^"]+)"', html)


def test_plotly_is_served_from_the_installed_package_not_a_cdn():
    found = finders.find("vendor/plotly/plotly.min.js")

    assert found and "site-packages/plotly/package_data" in found.replace("\\", "/")
    assert finders.find("js/charts.js")


def test_plotly_js_is_really_downloadable(viewer_client):
    response = viewer_client.get(PLOTLY)

    assert response.status_code == 200
    head = b"".join(response.streaming_content)[:200] if response.streaming else response.content[:200]
    assert b"plotly.js" in head


def test_node_detail_has_a_telemetry_section_with_four_charts(viewer_client, nodes):
    html = viewer_client.get("/nodes/h.example.com/").content.decode()

    (section,) = elements(html, "telemetry")
    assert section["data-series-url"] == "/api/v1/nodes/h.example.com/series/"
    assert section["data-range"] == "1h"
    assert section["data-interval-s"] == "30"
    assert section["data-has-samples"] == "true"
    assert "data-gpu-index" not in section  # one line per GPU, coloured by each GPU's index
    assert [chart["data-metric"] for chart in elements(html, "chart")] == [
        "utilization_pct", "memory_used_mib", "power_w", "temperature_c",
    ]
    ranges = [(link["data-range"], "aria-current" in link) for link in elements(html, "range-picker__option")]
    assert ranges == [("1h", True), ("6h", False), ("24h", False), ("7d", False), ("30d", False)]
    assert scripts(html)[-2:] == [PLOTLY, CHARTS]
    # GPU 1 has reported, so the charts show and the empty state starts hidden.
    (charts,) = elements(html, "charts")
    (empty,) = elements(html, "telemetry__empty")
    assert "hidden" not in charts and "hidden" in empty


def test_the_range_in_the_address_is_preselected(viewer_client, nodes):
    html = viewer_client.get("/nodes/h.example.com/?range=7d").content.decode()

    assert elements(html, "telemetry")[0]["data-range"] == "7d"
    assert [link["data-range"] for link in elements(html, "range-picker__option") if "aria-current" in link] == ["7d"]


def test_an_unknown_range_in_the_address_falls_back_to_an_hour(viewer_client, nodes):
    html = viewer_client.get("/nodes/h.example.com/?range=forever").content.decode()

    assert elements(html, "telemetry")[0]["data-range"] == "1h"


def test_a_node_that_never_reported_shows_the_empty_state(viewer_client, nodes):
    html = viewer_client.get("/nodes/quiet/").content.decode()

    assert EMPTY in html
    (charts,) = elements(html, "charts")
    (empty,) = elements(html, "telemetry__empty")
    assert "hidden" in charts and "hidden" not in empty
    assert elements(html, "telemetry")[0]["data-has-samples"] == "false"


def test_the_empty_state_names_the_poll_interval(viewer_client, nodes, settings):
    settings.TELEMETRY_POLL_INTERVAL_S = 15

    html = viewer_client.get("/nodes/quiet/").content.decode()

    assert "No telemetry yet — samples arrive every 15 s" in html
    assert elements(html, "telemetry")[0]["data-interval-s"] == "15"


def test_node_detail_links_each_gpu_to_its_page(viewer_client, nodes):
    html = viewer_client.get("/nodes/h.example.com/").content.decode()

    assert 'href="/nodes/h.example.com/gpus/0/"' in html
    assert 'href="/nodes/h.example.com/gpus/1/"' in html


def test_a_node_without_gpus_has_no_charts(viewer_client):
    make_node("cpu-only", gpu_count=0)

    html = viewer_client.get("/nodes/cpu-only/").content.decode()

    assert not elements(html, "telemetry")
    assert PLOTLY not in html


# --- GPU page -----------------------------------------------------------------------------------


def test_the_gpu_page_shows_latest_values_charts_and_partitions(viewer_client, nodes):
    response = viewer_client.get("/nodes/h.example.com/gpus/1/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "GPU 1" in html and "GPU-h.example.com-1" in html
    (section,) = elements(html, "telemetry")
    assert section["data-series-url"] == "/api/v1/gpus/GPU-h.example.com-1/series/"
    assert section["data-gpu-index"] == "1"
    assert len(elements(html, "chart")) == 4
    assert scripts(html)[-2:] == [PLOTLY, CHARTS]
    text = " ".join(re.sub(r"<[^>]+>", " ", html.replace("&nbsp;", " ")).split())
    assert "Utilization 64 %" in text
    # 40960 of 81920 MiB: 40 GB of 80 GB (1 GB = 1024 MiB), 50 %.
    assert "Memory used 40 GB of 80 GB (50 %)" in text
    assert "Power 512 W" in text and "Temperature 66 °C" in text
    # The node's other GPU is one click away.
    assert 'href="/nodes/h.example.com/gpus/0/"' in html


def test_the_gpu_page_draws_the_mig_layout(viewer_client, nodes):
    html = viewer_client.get("/nodes/quiet/gpus/0/").content.decode()

    (cell,) = [c for c in elements(html, "mig__cell") if c.get("data-size") == "4"]
    assert cell["aria-label"] == "3g.40gb at slices 0–3, in use by ml/x-0"
    assert EMPTY in html


@pytest.mark.parametrize("url", ["/nodes/h.example.com/gpus/7/", "/nodes/nope/gpus/0/"])
def test_the_gpu_page_is_404_for_an_unknown_gpu(viewer_client, nodes, url):
    assert viewer_client.get(url).status_code == 404


def test_the_gpu_page_needs_a_role(client, outsider, nodes):
    assert client.get("/nodes/quiet/gpus/0/").status_code == 302  # to the sign-in page
    client.force_login(outsider)
    assert client.get("/nodes/quiet/gpus/0/").status_code == 403


def test_the_gpu_page_uses_a_fixed_number_of_queries(viewer_client, nodes, django_assert_max_num_queries):
    for slot in range(1, 4):
        make_partition(GPU.objects.get(uuid="GPU-quiet-0"), PartitionKind.MIG, slot, 142, 10240,
                       mig_profile="1g.10gb", mig_start=3 + slot, mig_size=1)
    with django_assert_max_num_queries(7):
        response = viewer_client.get("/nodes/quiet/gpus/0/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "GPU-quiet-0" in html
    # The page drew every partition it counted queries for: the fixture's 3g.40gb and the three 1g.10gb.
    assert len([c for c in elements(html, "mig__cell") if c.get("aria-label", "").startswith("1g.10gb")]) == 3


# --- overview node map ----------------------------------------------------------------------------


def test_the_overview_embeds_one_row_per_node_and_loads_plotly(viewer_client, nodes):
    html = viewer_client.get("/").content.decode()

    (card,) = elements(html, "heatmap-card")
    assert card["data-refresh-url"] == "/api/v1/heatmap/"
    assert elements(html, "heatmap")  # the chart container
    data = json.loads(re.search(r'<script id="heatmap-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    rows = [dict(zip(data["columns"], row, strict=True)) for row in data["nodes"]]
    assert [row["name"] for row in rows] == ["h.example.com", "quiet"]
    # Per node, not per GPU: the mean of the GPUs that report (one of h's two), and no GPU list.
    assert [(row["gpus"], row["reporting"], row["utilization_pct"]) for row in rows] == [(2, 1, 64.0), (1, 0, None)]
    assert data["reporting_gpus"] == 1
    # Links are built in the browser from one template, not one URL per node or GPU.
    assert data["node_url"] == "/nodes/{name}/"
    assert "/gpus/" not in json.dumps(data)
    assert scripts(html)[-2:] == [PLOTLY, CHARTS]
    # One GPU reports: no "no telemetry" notice.
    (empty,) = elements(html, "heatmap-card__empty")
    assert "hidden" in empty


def test_the_overview_says_when_no_gpu_reports(viewer_client):
    make_node("silent", gpu_count=2)

    html = viewer_client.get("/").content.decode()

    (empty,) = elements(html, "heatmap-card__empty")
    assert "hidden" not in empty
    assert "No telemetry yet — samples arrive every 30 s." in html


def test_the_overview_without_gpus_has_no_heatmap(viewer_client):
    html = viewer_client.get("/").content.decode()

    assert "No GPUs known yet." in html
    assert not elements(html, "heatmap")
    assert PLOTLY not in html
