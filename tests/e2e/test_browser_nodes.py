"""A person's path through the inventory pages in a real browser: sign in, list nodes, open one.

Runs Debian's Chromium headless through Playwright against pytest-django's live_server (a real
HTTP server on a transactional test database). Screenshots land in the test's tmp_path.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from nodes.models import Node
from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.models import Deployment, Placement
from tests.e2e.accounts import PASSWORD, USERNAME, sign_in, sign_in_as_staff
from tests.nodes.factories import make_node, make_partition

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def staff_user() -> User:
    return User.objects.create_superuser(USERNAME, "root@example.com", PASSWORD)


@pytest.fixture
def demo_cluster() -> dict[str, Node]:
    """An MPS x4 node with telemetry, a MIG node (3g.40gb used, 2g.20gb + 1g.10gb free), a cordoned L4 node."""
    mps = make_node("gpu-mps-a", sharing_mode=SharingMode.MPS, sharing_replicas=4, partitions=False)
    for gpu, util in zip(mps.gpus.order_by("index"), (35.0, 55.0), strict=True):
        gpu.utilization_pct, gpu.temperature_c, gpu.power_w = util, 63.0, 455.0
        if gpu.index == 0:
            gpu.allocated_milli, gpu.allocated_memory_mib = 250, gpu.memory_mib // 4
        gpu.save()
        for slot in range(4):
            pod = "ml/bert-0" if (gpu.index, slot) == (0, 0) else ""
            make_partition(gpu, PartitionKind.MPS, slot, 250, gpu.memory_mib // 4, pod=pod)

    mig = make_node(
        "gpu-mig-b", gpu_count=2, sharing_mode=SharingMode.MIG, partitions=False,
        applied_config="gpuplane-gpu-mig-b",
        labels={"nvidia.com/mig.config": "gpuplane-gpu-mig-b", "kubernetes.io/hostname": "gpu-mig-b"},
    )
    deployment = Deployment.objects.create(name="llama", model="llama-3-8b", memory_mib=30000, namespace="ml")
    placement = Placement.objects.create(deployment=deployment, node=mig, replica_index=0)
    for gpu in mig.gpus.all():
        slice_mib = gpu.memory_mib // 8
        gpu.mig_enabled = True
        if gpu.index == 0:
            gpu.allocated_milli, gpu.allocated_memory_mib = 428, 4 * slice_mib
        gpu.save()
        make_partition(gpu, PartitionKind.MIG, 0, 428, 4 * slice_mib, mig_profile="3g.40gb", mig_start=0, mig_size=4,
                       placement=placement if gpu.index == 0 else None)
        make_partition(gpu, PartitionKind.MIG, 1, 285, 2 * slice_mib, mig_profile="2g.20gb", mig_start=4, mig_size=2)
        make_partition(gpu, PartitionKind.MIG, 2, 142, 1 * slice_mib, mig_profile="1g.10gb", mig_start=6, mig_size=1)

    l4 = make_node("l4-c", gpu_model="L4", gpu_count=1, gpu_memory_mib=23034, ready=False, cordoned=True)
    return {"mps": mps, "mig": mig, "l4": l4}


def test_a_viewer_signs_in_lists_nodes_and_opens_a_mig_node(
    page: Page, live_server, viewer_user, demo_cluster, tmp_path: Path
):
    base = live_server.url
    sign_in(page, base)

    page.goto(f"{base}/nodes/")
    expect(page.get_by_role("heading", name="Nodes", exact=True)).to_be_visible()
    expect(page.locator(".badge--role")).to_have_text("viewer")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("gpu-mig-b")
    expect(rows.nth(0)).to_contain_text("H100-SXM5-80GB")
    expect(rows.nth(0)).to_contain_text("MIG")
    expect(rows.nth(0)).to_contain_text("0.43 / 2 GPUs")  # the used 3g.40gb: 428 milli of one GPU
    expect(rows.nth(1)).to_contain_text("MPS ×4")
    expect(rows.nth(1)).to_contain_text("0.25 / 2 GPUs")  # one 250-milli MPS slot in use
    expect(rows.nth(1)).to_contain_text("45 %")  # mean of 35 and 55
    expect(rows.nth(2)).to_contain_text("L4")
    expect(rows.nth(2)).to_contain_text("NotReady")
    expect(rows.nth(2)).to_contain_text("Cordoned")
    page.screenshot(path=tmp_path / "nodes-list.png", full_page=True)

    # Filtering through the form narrows the table to the one MIG node.
    page.get_by_label("Sharing mode").select_option("mig")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("gpu-mig-b")

    page.get_by_role("link", name="gpu-mig-b").click()
    page.wait_for_url(f"{base}/nodes/gpu-mig-b/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("gpu-mig-b")
    gpu_rows = page.locator("#gpu-table tbody tr")
    expect(gpu_rows).to_have_count(2)
    expect(gpu_rows.first).to_contain_text("GPU-gpu-mig-b-0")

    diagram = page.get_by_role("list", name="MIG layout of GPU 0: 8 memory slices")
    used = diagram.get_by_role("listitem", name="3g.40gb at slices 0–3, in use by ml/llama #0")
    expect(used).to_be_visible()
    expect(used).to_contain_text("3g.40gb")
    free = diagram.get_by_role("listitem", name="2g.20gb at slices 4–5, free")
    expect(free).to_be_visible()
    expect(diagram.get_by_role("listitem", name="1g.10gb at slice 6, free")).to_be_visible()
    expect(diagram.get_by_role("listitem", name="slice 7 unused")).to_be_visible()

    # The grid really draws [start, start+size): the 4-slice block is twice as wide as the
    # 2-slice one (give or take the gaps) and starts at the diagram's left edge.
    grid_box = diagram.bounding_box()
    used_box, free_box = used.bounding_box(), free.bounding_box()
    assert grid_box and used_box and free_box
    assert abs(used_box["x"] - grid_box["x"]) < 1
    assert 1.9 < used_box["width"] / free_box["width"] < 2.3
    assert free_box["x"] > used_box["x"] + used_box["width"]
    expect(page.get_by_text("MIG instance in use")).to_be_visible()  # legend
    page.screenshot(path=tmp_path / "node-detail.png", full_page=True)


def test_the_overview_and_narrow_screens(page: Page, live_server, staff_user, demo_cluster, tmp_path: Path):
    sign_in_as_staff(page, live_server.url)
    page.goto(f"{live_server.url}/")
    expect(page.get_by_role("heading", name="Cluster overview")).to_be_visible()
    expect(page.get_by_role("region", name="Nodes")).to_contain_text("3")
    # One 1/4 MPS slot and one 3g.40gb (3/7) in use: 0.68 of the 5 GPUs' compute, in GPU-equivalents.
    expect(page.get_by_role("region", name="Allocated")).to_contain_text("0.68 of 5 GPU-equivalents")
    expect(page.get_by_role("row", name="H100-SXM5-80GB 4")).to_be_visible()
    page.screenshot(path=tmp_path / "overview.png", full_page=True)

    # On a phone-sized screen the page must not scroll sideways; wide tables scroll in their box.
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/", "/nodes/", "/nodes/gpu-mig-b/"):
        page.goto(f"{live_server.url}{path}")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} overflows a narrow screen by {overflow}px"
    page.screenshot(path=tmp_path / "node-detail-narrow.png", full_page=True)

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{live_server.url}/accounts/login/")
