"""Telemetry charts in a real browser: plotly draws node and GPU time series and the overview's node map
from the API, the range picker reloads them, and a page fills by itself as samples arrive.

Screenshots land in the test's tmp_path (run with `--basetemp DIR` to keep them somewhere known).
"""
from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from nodes.models import GPU, GPUSample, Node
from nodes.vocabulary import SharingMode
from tests.e2e.accounts import sign_in
from tests.nodes.factories import make_node

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRACES = ".js-plotly-plot .scatterlayer .trace"
LINES = ".scatterlayer .trace"  # inside a chart element, which is itself the .js-plotly-plot


def record_history(node: Node, minutes: int = 20, step_s: int = 30) -> None:
    """`minutes` of samples every `step_s` for each GPU of `node`: smooth, different per GPU; the last
    sample of each GPU is copied onto its row, as ingest does."""
    now = timezone.now().replace(microsecond=0)
    rows = []
    for gpu in node.gpus.order_by("index"):
        newest_first = []
        for k in range(minutes * 60 // step_s):
            phase = k / 6 + gpu.index
            util = 45 + 30 * math.sin(phase) + 8 * gpu.index
            newest_first.append(GPUSample(
                gpu=gpu, ts=now - timedelta(seconds=k * step_s), utilization_pct=max(0.0, min(100.0, util)),
                memory_used_mib=int(20000 + 9000 * math.cos(phase / 2) + 6000 * gpu.index), memory_total_mib=gpu.memory_mib,
                power_w=round(220 + 3.6 * util, 1), temperature_c=round(38 + 0.35 * util, 1), source="simulated",
            ))
        latest = newest_first[0]
        GPU.objects.filter(pk=gpu.pk).update(
            utilization_pct=latest.utilization_pct, memory_used_mib=latest.memory_used_mib, power_w=latest.power_w,
            temperature_c=latest.temperature_c, sampled_at=latest.ts,
        )
        rows += newest_first
    GPUSample.objects.bulk_create(rows)


@pytest.fixture
def fleet() -> dict[str, Node]:
    """gpu-a: 4 H100 with 20 min of samples; gpu-b: 2 A100 (GPU 1 silent); quiet: 1 L4 that never reported."""
    a = make_node("gpu-a", gpu_count=4)
    record_history(a)
    b = make_node("gpu-b", "A100-SXM4-80GB", 2, sharing_mode=SharingMode.MIG)
    record_history(b)
    GPUSample.objects.filter(gpu__uuid="GPU-gpu-b-1").delete()
    GPU.objects.filter(uuid="GPU-gpu-b-1").update(utilization_pct=None, memory_used_mib=None, power_w=None,
                                                  temperature_c=None, sampled_at=None)
    quiet = make_node("quiet", "L4", 1, gpu_memory_mib=23034)
    return {"a": a, "b": b, "quiet": quiet}


def test_node_charts_draw_one_line_per_gpu_and_follow_the_range(page: Page, live_server, viewer_user, fleet, tmp_path: Path):
    base = live_server.url
    sign_in(page, base)

    page.goto(f"{base}/nodes/gpu-a/")
    section = page.locator("[data-telemetry]")
    expect(section.get_by_role("heading", name="Telemetry")).to_be_visible()
    # Four charts, four GPUs each.
    expect(section.locator(TRACES)).to_have_count(16)
    for chart in ("utilization_pct", "memory_used_mib", "power_w", "temperature_c"):
        expect(section.locator(f'[data-metric="{chart}"] {LINES}')).to_have_count(4)
    expect(section.locator("[data-telemetry-meta]")).to_contain_text("Raw samples")
    expect(section.locator(".legend text.legendtext").first).to_have_text("GPU 0")
    expect(section.locator("[data-telemetry-empty]")).to_be_hidden()
    page.screenshot(path=tmp_path / "node-charts.png", full_page=True)

    # Each line has a point per sample: 40 samples over 20 minutes.
    points = page.evaluate(
        "() => document.querySelector('[data-metric=utilization_pct]').data.map((t) => t.y.filter((v) => v !== null).length)"
    )
    assert points == [40, 40, 40, 40]

    page.get_by_role("link", name="7d", exact=True).click()
    expect(page.get_by_role("link", name="7d", exact=True)).to_have_attribute("aria-current", "true")
    expect(section.locator("[data-telemetry-meta]")).to_contain_text("5-minute averages")
    assert page.url.endswith("/nodes/gpu-a/?range=7d")
    # 20 minutes of samples fall into 4 or 5 five-minute buckets per GPU.
    page.wait_for_function(
        "() => document.querySelector('[data-metric=power_w]').data[0].y.filter((v) => v !== null).length <= 5"
    )
    page.screenshot(path=tmp_path / "node-charts-7d.png", full_page=True)


def test_a_silent_node_fills_its_charts_without_a_reload(page: Page, live_server, viewer_user, fleet, settings, tmp_path: Path):
    settings.TELEMETRY_POLL_INTERVAL_S = 5  # the charts refresh on the poll interval; 5 s keeps the test short
    base = live_server.url
    sign_in(page, base)

    page.goto(f"{base}/nodes/quiet/")
    empty = page.locator("[data-telemetry-empty]")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("No telemetry yet — samples arrive every 5 s")
    page.screenshot(path=tmp_path / "node-empty.png", full_page=True)

    record_history(fleet["quiet"], minutes=2)
    expect(page.locator(f'[data-metric="utilization_pct"] {LINES}')).to_have_count(1, timeout=15_000)
    expect(empty).to_be_hidden()


def test_a_prometheus_that_is_down_shows_an_empty_chart_with_the_reason(
    page: Page, live_server, viewer_user, fleet, settings, tmp_path: Path
):
    from bench.prometheus_server import free_port

    settings.GPUPLANE_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"  # the store, and nothing listens there
    base = live_server.url
    sign_in(page, base)

    page.goto(f"{base}/nodes/gpu-a/")
    empty = page.locator("[data-telemetry-empty]")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("Telemetry store unavailable: Prometheus is unreachable (connection failed).")
    expect(page.locator("[data-telemetry-charts]")).to_be_hidden()
    expect(page.locator("[data-empty-never]")).to_be_hidden()
    page.screenshot(path=tmp_path / "node-prometheus-down.png", full_page=True)


def test_the_gpu_page_charts_one_gpu(page: Page, live_server, viewer_user, fleet, tmp_path: Path):
    base = live_server.url
    sign_in(page, base)

    page.goto(f"{base}/nodes/gpu-a/gpus/2/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("GPU 2")
    expect(page.locator(f"[data-telemetry] {TRACES}")).to_have_count(4)
    expect(page.get_by_role("link", name="GPU 3")).to_be_visible()
    page.screenshot(path=tmp_path / "gpu-page.png", full_page=True)


def test_the_overview_maps_every_node_and_drills_into_one(page: Page, live_server, viewer_user, fleet, tmp_path: Path):
    base = live_server.url
    sign_in(page, base)

    card = page.locator("[data-heatmap]")
    expect(card.locator(".js-plotly-plot .heatmaplayer .hm")).to_have_count(2)  # utilization + "no telemetry" layer
    expect(card.locator("[data-heatmap-meta]")).to_contain_text("3 nodes · 5 of 7 GPUs reporting")
    # One tile per node in name order (three fit on one line); the colour is the mean of the
    # GPUs that report, and a node where none does is in the "no telemetry" layer.
    z = page.evaluate("() => document.querySelector('[data-heatmap-chart]').data[1].z")
    silent = page.evaluate("() => document.querySelector('[data-heatmap-chart]').data[0].z")
    means = {
        name: sum(u) / len(u)
        for name in ("gpu-a", "gpu-b")
        for u in [[g.utilization_pct for g in GPU.objects.filter(node__name=name) if g.utilization_pct is not None]]
    }
    assert len(z) == 1 and len(z[0]) == 3
    assert z[0][0] == pytest.approx(means["gpu-a"], abs=0.05)
    assert z[0][1] == pytest.approx(means["gpu-b"], abs=0.05)  # GPU 1 is silent: GPU 0's alone
    assert z[0][2] is None and silent[0] == [None, None, 1]
    hover = page.evaluate("() => document.querySelector('[data-heatmap-chart]').data[1].text[0]")
    assert hover[1].startswith("<b>gpu-b</b>") and "2 GPUs" in hover[1] and "1 of 2 reporting" in hover[1]
    assert "No telemetry yet" in hover[2]
    page.screenshot(path=tmp_path / "overview-node-map.png", full_page=True)

    # Click the middle of gpu-b's tile (column 2 of 3): its node page, which lists its GPUs.
    box = card.locator(".nsewdrag").first.bounding_box()
    assert box
    page.mouse.click(box["x"] + box["width"] * (1.5 / 3), box["y"] + box["height"] / 2)
    page.wait_for_url(f"{base}/nodes/gpu-b/")
    expect(page.get_by_role("link", name="GPU 1").first).to_be_visible()


def test_charts_fit_a_phone_screen(page: Page, live_server, viewer_user, fleet, tmp_path: Path):
    base = live_server.url
    sign_in(page, base)
    page.set_viewport_size({"width": 390, "height": 844})
    for name, path in (("overview", "/"), ("node", "/nodes/gpu-a/"), ("gpu", "/nodes/gpu-a/gpus/0/")):
        page.goto(f"{base}{path}")
        page.wait_for_selector(".js-plotly-plot")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} overflows a narrow screen by {overflow}px"
        page.screenshot(path=tmp_path / f"{name}-narrow.png", full_page=True)
