"""Honest numbers in a real browser: on the demo cluster, every count on the overview equals the
sum of its breakdown, and the overview's and node pages' figures equal what /api/v1/ and /metrics
say about the same inventory.

The expected figures are computed here from the API's JSON (nodes, GPUs, partitions) and the
/metrics text, never from the code that renders the pages.
"""
from __future__ import annotations

import re
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from nodes.demo import load_demo_cluster
from nodes.models import GPU
from tests.e2e.accounts import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo() -> None:
    """The 12-node demo cluster, with telemetry on the first four GPUs of every node: busy, quiet,
    busy by memory only, quiet (so idle differs from "nothing allocated")."""
    load_demo_cluster()
    readings = [(80.0, 0.2, 610.0), (5.0, 0.1, 95.5), (10.0, 0.9, 240.0), (2.0, 0.0, 71.25)]
    for gpu in GPU.objects.filter(index__lt=4):
        util, memory_share, power = readings[gpu.index]
        gpu.utilization_pct, gpu.power_w = util, power
        gpu.memory_used_mib, gpu.temperature_c = int(gpu.memory_mib * memory_share), 50.0
        gpu.save(update_fields=["utilization_pct", "power_w", "memory_used_mib", "temperature_c"])


def api_all(page: Page, base: str, path: str) -> list[dict[str, Any]]:
    """Every row of a paginated API list, read with the browser's own session."""
    rows: list[dict[str, Any]] = []
    url: str | None = f"{base}{path}?limit=500"
    while url:
        response = page.request.get(url)
        assert response.ok, (url, response.status)
        body = response.json()
        rows += body["results"]
        url = body["next"]
    return rows


def metric(text: str, name: str) -> list[float]:
    """Every sample of one metric family in the /metrics text."""
    return [float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]


def per_node(text: str, name: str) -> dict[str, float]:
    """{node: value} of a per-node metric family in the /metrics text."""
    return {node: float(v) for node, v in re.findall(rf'^{name}{{node="([^"]+)"}} (\S+)$', text, re.M)}


def gpu_equivalent(partition: dict[str, Any]) -> Fraction:
    """A partition in GPU-equivalents from the API's fields: a MIG instance's compute slices of 7
    (named by its profile), any other partition its share in thousandths."""
    if partition["kind"] == "mig":
        return Fraction(int(partition["mig_profile"].split("g.")[0]), 7)
    return Fraction(partition["share_milli"], 1000)


def numbers(locator) -> list[str]:
    return [text.strip() for text in locator.all_inner_texts()]


def test_the_overview_adds_up_and_agrees_with_the_api_and_metrics(
    page: Page, live_server, viewer_user, demo, tmp_path: Path
):
    base = live_server.url
    sign_in(page, base)
    nodes = api_all(page, base, "/api/v1/nodes/")
    gpus = api_all(page, base, "/api/v1/gpus/")
    partitions = api_all(page, base, "/api/v1/partitions/")
    metrics = page.request.get(f"{base}/metrics").text()
    page.goto(f"{base}/")

    # Nodes: the total, and one state per node that adds up to it.
    card = page.locator('[data-card="nodes"]')
    expect(card.locator("[data-total]")).to_have_text(str(len(nodes)))
    states = {key: int(card.locator(f'[data-part="{key}"] dd').inner_text()) for key in ("ready", "cordoned", "notready")}
    assert sum(states.values()) == len(nodes)
    assert states["notready"] == sum(1 for n in nodes if not n["ready"])
    assert states["cordoned"] == sum(1 for n in nodes if n["ready"] and n["cordoned"])

    # GPUs: allocated + nothing allocated = idle + busy = the total; the API's and /metrics' figures.
    card = page.locator('[data-card="gpus"]')
    expect(card.locator("[data-total]")).to_have_text(str(len(gpus)))
    part = {key: int(card.locator(f'[data-part="{key}"] dd').inner_text()) for key in ("allocated", "unallocated", "idle", "busy")}
    assert part["allocated"] + part["unallocated"] == part["idle"] + part["busy"] == len(gpus)
    allocated = sum(1 for g in gpus if g["allocated_milli"] > 0 or g["allocated_memory_mib"] > 0)
    assert part["allocated"] == allocated == metric(metrics, "gpuplane_gpus_allocated")[0]
    assert part["idle"] == metric(metrics, "gpuplane_gpus_idle")[0]
    assert 0 < part["idle"] < len(gpus)
    power = sum(g["power_w"] for g in gpus if g["power_w"] is not None)
    assert power == pytest.approx(metric(metrics, "gpuplane_power_watts")[0])
    assert power == pytest.approx(sum(metric(metrics, "gpuplane_node_power_watts")))
    # The demo's telemetry draws 12.2 kW: shown in kW to one decimal.
    assert card.locator('[data-figure="power"] [data-value]').inner_text() == f"{power / 1000:.1f} kW"

    # Allocation in GPU-equivalents and GB, per sharing mode: each column adds up to its total.
    mode_of = {n["name"]: n["sharing_mode"] for n in nodes}
    equivalents: dict[str, Fraction] = defaultdict(Fraction)
    for p in partitions:
        if not p["free"]:
            equivalents[mode_of[p["node"]]] += gpu_equivalent(p)
    memory_mib: dict[str, int] = defaultdict(int)
    gpu_count: dict[str, int] = defaultdict(int)
    for g in gpus:
        memory_mib[mode_of[g["node"]]] += g["allocated_memory_mib"]
        gpu_count[mode_of[g["node"]]] += 1
    total_equivalents = sum(equivalents.values(), Fraction(0))
    card = page.locator('[data-card="allocation"]')
    assert float(card.locator("[data-total]").inner_text()) == pytest.approx(float(total_equivalents), abs=0.005)
    memory_gb = sum(memory_mib.values()) / 1024
    assert card.locator('[data-figure="memory"] [data-value]').inner_text() == f"{memory_gb:.1f}".removesuffix(".0") + " GB"

    table = page.locator('[data-card="modes"]')
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(len(gpu_count))
    shown_gpus = shown_equivalents = shown_gb = 0.0
    for i in range(rows.count()):
        row = rows.nth(i)
        mode = row.get_attribute("data-mode")
        assert mode is not None
        gpus_cell = int(row.locator('[data-col="gpus"]').inner_text())
        equivalents_cell = float(row.locator('[data-col="allocated"]').inner_text().split("\n")[0])
        gb_cell = float(row.locator('[data-col="memory"]').inner_text().split("\n")[0].removesuffix(" GB"))
        assert gpus_cell == gpu_count[mode]
        assert equivalents_cell == pytest.approx(float(equivalents[mode]), abs=0.01)  # rounded to sum to the total
        assert gb_cell == pytest.approx(memory_mib[mode] / 1024, abs=0.1)
        shown_gpus, shown_equivalents, shown_gb = shown_gpus + gpus_cell, shown_equivalents + equivalents_cell, shown_gb + gb_cell
    total = table.locator('tfoot [data-mode="total"]')
    assert int(total.locator('[data-col="gpus"]').inner_text()) == shown_gpus == len(gpus)
    assert float(total.locator('[data-col="allocated"]').inner_text()) == pytest.approx(shown_equivalents)
    assert float(total.locator('[data-col="memory"]').inner_text().removesuffix(" GB")) == pytest.approx(shown_gb)
    # MIG: the GPUs of MIG nodes, with MIG on or whole, as the API's mig_enabled says.
    mig_on = sum(1 for g in gpus if g["mig_enabled"] and mode_of[g["node"]] == "mig")
    expect(table.locator('[data-mode="mig"] th')).to_contain_text(f"{mig_on} with MIG on, {gpu_count['mig'] - mig_on} whole")
    expect(page.locator('[data-card="allocation"]')).not_to_contain_text("Partitions")

    # The node map: one row per node, each figure the API's and /metrics' for that node.
    page.wait_for_selector("[data-heatmap][data-loaded]")
    data = page.evaluate("() => JSON.parse(document.getElementById('heatmap-data').textContent)")
    tiles = {row[0]: dict(zip(data["columns"], row, strict=True)) for row in data["nodes"]}
    assert sorted(tiles) == sorted(n["name"] for n in nodes)
    node_gpus, node_power = per_node(metrics, "gpuplane_node_gpus"), per_node(metrics, "gpuplane_node_power_watts")
    node_utilization = per_node(metrics, "gpuplane_node_utilization_percent")
    node_equivalents: dict[str, Fraction] = defaultdict(Fraction)
    for p in partitions:
        if not p["free"]:
            node_equivalents[p["node"]] += gpu_equivalent(p)
    for name, tile in tiles.items():
        mine = [g for g in gpus if g["node"] == name]
        reporting = [g["utilization_pct"] for g in mine if g["utilization_pct"] is not None]
        assert tile["gpus"] == len(mine) == node_gpus[name]
        assert tile["reporting"] == len(reporting)
        assert tile["utilization_pct"] == pytest.approx(sum(reporting) / len(reporting), abs=0.051)  # 1 decimal
        assert tile["utilization_pct"] == pytest.approx(node_utilization[name], abs=0.051)
        assert tile["power_w"] == pytest.approx(node_power[name], abs=0.051)
        assert tile["allocated"] == pytest.approx(float(node_equivalents[name]), abs=0.005)
    assert sum(t["gpus"] for t in tiles.values()) == len(gpus)
    assert sum(t["power_w"] for t in tiles.values()) == pytest.approx(power, abs=0.051 * len(tiles))  # each to 1 decimal
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)


def share_column(page: Page, gpu_index: int) -> list[float]:
    """The Share column of one GPU's partitions table, the unpartitioned row included, in percent."""
    cells = page.locator(f"#gpu-{gpu_index} table tbody tr td:nth-child(3)")
    return [float(text.split("·")[-1].strip().removesuffix(" %")) for text in numbers(cells)]


def test_node_pages_state_each_mode_in_its_own_terms(page: Page, live_server, viewer_user, demo, tmp_path: Path):
    base = live_server.url
    sign_in(page, base)
    gpus = {(g["node"], g["index"]): g for g in api_all(page, base, "/api/v1/gpus/")}

    # Weighted MPS: a device-plugin config named as such, pods per GPU, shares counted, not "2 / 2".
    page.goto(f"{base}/nodes/a100-node-4/")
    expect(page.locator('[data-fact="config"] dt')).to_have_text("Applied device-plugin config")
    expect(page.locator('[data-fact="replicas"] dt')).to_have_text("Pods per GPU")
    expect(page.locator('[data-fact="replicas"] dd')).to_contain_text("up to 4")
    expect(page.locator('[data-fact="partitions"] dt')).to_have_text("Weighted MPS shares handed out")
    expect(page.locator('[data-fact="partitions"] dd')).to_have_text("2")
    node_gpus = [g for (node, _), g in gpus.items() if node == "a100-node-4"]
    expected = sum(g["allocated_milli"] for g in node_gpus) / 1000  # weighted shares: 500 + 250
    assert page.locator('[data-value="gpu-equivalents"]').inner_text() == f"{expected:g}"
    assert share_column(page, 0) == [50.0, 25.0, 25.0]  # two shares and the rest: 100 %
    expect(page.locator("main")).to_contain_text("last change from the cluster 0")  # the sync that loaded it
    page.screenshot(path=str(tmp_path / "weighted-mps-node.png"), full_page=True)

    # Time-slicing: each replica's memory is the GPU's / R, not the whole GPU on every row.
    page.goto(f"{base}/nodes/h100-node-4/")
    replica_gb = gpus[("h100-node-4", 0)]["memory_mib"] / 4 / 1024
    memory_cells = numbers(page.locator("#gpu-0 table tbody tr td:nth-child(4)"))
    assert memory_cells == [f"{replica_gb:.1f} GB*"] * 4
    expect(page.locator('[data-fact="partitions"] dt')).to_have_text("Time-slice replicas in use")
    expect(page.locator('[data-fact="partitions"] dd')).to_have_text("3 / 32")

    # MIG: shares are the profiles' sevenths, rounded, and each GPU's column adds up to 100 %.
    page.goto(f"{base}/nodes/h100-node-3/")
    for index in range(5):
        shares = share_column(page, index)
        assert sum(shares) == pytest.approx(100.0), (index, shares)
    # 3g + 2g + 2g cover the GPU: 42.857 + 28.571 + 28.571 by largest remainder (the two largest
    # remainders, .714, round up) = 100.0, where truncation showed 42.8 + 28.5 + 28.5 = 99.8.
    assert share_column(page, 2) == [28.6, 28.6, 42.8]
    assert numbers(page.locator("#gpu-2 table tbody tr td:nth-child(3)"))[2].startswith("3/7")
    # 3g + 3g leave a seventh in no instance: equal instances read equal, the rest takes the difference.
    assert share_column(page, 1) == [42.9, 42.9, 14.2]
    expect(page.locator("main")).not_to_contain_text("GiB")
