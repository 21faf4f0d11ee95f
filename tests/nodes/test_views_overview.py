"""The cluster overview: every count with a breakdown that adds up to it, allocation in
GPU-equivalents and GB, and the idle / allocated GPUs that /metrics exports; the node list's
allocation in exact GPU-equivalents.

Uses test_views' three-node `cluster` fixture (an MPS x4 node with telemetry, a MIG node, a
cordoned NotReady L4 node).
"""
from __future__ import annotations

import re

import pytest

from tests.nodes import test_views

pytestmark = pytest.mark.django_db
H100 = test_views.H100
# The fixtures, shared by name (pytest finds fixtures among a module's attributes).
cluster = test_views.cluster
viewer_client = test_views.viewer_client


def parts(part_list) -> list[tuple[str, str]]:
    return [(part.key, part.value) for part in part_list]


def test_the_overview_summarises_the_cluster(viewer_client, cluster):
    response = viewer_client.get("/")
    assert response.status_code == 200
    overview = response.context["overview"]
    # Each node in one state: gpu-mps-a and gpu-mig-b schedulable, l4-c not ready (and cordoned).
    assert overview.nodes_total == 3
    assert parts(overview.node_parts) == [("ready", "2"), ("cordoned", "0"), ("notready", "1")]
    assert overview.gpus_total == 4
    assert parts(overview.mode_parts) == [("mps", "2"), ("exclusive", "1"), ("mig", "1")]
    assert overview.mode_parts[2].note == "1 with MIG on, 0 whole"
    # Allocated: mps-a GPU 0 (a slot) and the MIG GPU (the 3g); idle: only the L4 (no telemetry,
    # nothing allocated); the MPS GPUs report 30 % and 50 %, at or over the 30 % threshold.
    assert parts(overview.use_parts) == [("allocated", "2"), ("unallocated", "2")]
    assert parts(overview.idle_parts) == [("idle", "1"), ("busy", "3")]
    assert (overview.reporting_gpus, overview.mean_utilization_pct) == (2, 40.0)
    assert (overview.power_gpus, overview.power_w, overview.power) == (2, 824.0, "824 W")  # 412 W + 412 W
    # GPU-equivalents: one 1/4 MPS slot + the 3g.40gb's 3/7 = 0.6786 -> 0.68 = 0.25 + 0.43 + 0.
    assert overview.allocated_gpu_equivalents == "0.68"
    assert parts(overview.allocation_parts) == [("mps", "0.25"), ("exclusive", "0"), ("mig", "0.43")]
    assert overview.allocation_parts[0].note == "1 of 8 MPS slots"
    assert overview.allocation_parts[2].note == "1 of 2 MIG instances"
    # Memory: the slot's 81559 // 4 = 20389 MiB = 19.9 GB of 3 x 81559 + 23034 MiB = 261.4 GB.
    assert (overview.memory_allocated, overview.memory_total) == ("19.9 GB", "261.4 GB")
    assert [(r.label, r.count) for r in response.context["gpus_by_model"]] == [(H100, 3), ("L4", 1)]
    body = response.content.decode()
    assert 'href="/nodes/"' in body
    assert "of 10 in use" not in body  # no count adding 8 MPS slots and 2 MIG instances as equal units
    assert "1 of 8 MPS slots" in body and "1 of 2 MIG instances" in body  # each kind in its own unit


def test_every_overview_count_equals_the_sum_of_its_breakdown(viewer_client, cluster):
    overview = viewer_client.get("/").context["overview"]
    assert sum(int(p.value) for p in overview.node_parts) == overview.nodes_total
    for breakdown in (overview.mode_parts, overview.use_parts, overview.idle_parts):
        assert sum(int(p.value) for p in breakdown) == overview.gpus_total
    assert sum(float(p.value) for p in overview.allocation_parts) == pytest.approx(float(overview.allocated_gpu_equivalents))
    assert sum(float(p.value.removesuffix(" GB")) for p in overview.memory_parts) == pytest.approx(
        float(overview.memory_allocated.removesuffix(" GB"))
    )


def test_the_overview_shows_the_idle_and_allocated_gpus_that_metrics_exports(viewer_client, cluster):
    overview = viewer_client.get("/").context["overview"]
    metrics = viewer_client.get("/metrics").content.decode()
    exported = dict(re.findall(r"^(gpuplane_gpus_(?:idle|allocated)) (\S+)$", metrics, re.M))
    assert float(exported["gpuplane_gpus_idle"]) == int(overview.idle_parts[0].value)
    assert float(exported["gpuplane_gpus_allocated"]) == int(overview.use_parts[0].value)


def test_the_node_list_states_mig_allocation_exactly(viewer_client, cluster):
    # Seven used 1g instances fill a GPU: 7 x 1/7 = 1, where the stored shares add up to 7 x 142 = 994.
    node = test_views.Node.objects.create(name="full-mig", gpu_model=H100, gpu_count=1, sharing_mode="mig")
    gpu = test_views.make_gpu(node, 0, mig_enabled=True, allocated_milli=994)
    for slot in range(7):
        test_views.mig(gpu, slot, "1g.10gb", slot, 1, pod=f"ml/small-{slot}")
    rows = test_views.table_rows(viewer_client.get("/nodes/?search=full-mig").content.decode())
    assert f"full-mig {H100} 1 MIG — 1 / 1 GPUs Ready" in rows
