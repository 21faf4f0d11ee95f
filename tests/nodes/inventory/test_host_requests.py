"""Inventory sync counts what every pod requests of its node's CPU and memory, as kube-scheduler's
NodeResourcesFit does: pods gpuplane did not place (other teams' CPU-only and GPU pods, gpuplane's
replicas handed to the default scheduler) on the Node row; gpuplane's placed pods are held by
their placements instead, and are not counted twice."""
from __future__ import annotations

import pytest

from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from tests.nodes.inventory.helpers import FakeCluster, gpu_node, pod

GPUPLANE = {"app.kubernetes.io/managed-by": "gpuplane"}


def _requested(name: str) -> tuple[int, int]:
    node = Node.objects.get(name=name)
    return node.cpu_requested_milli, node.memory_requested_mib


@pytest.mark.django_db
def test_every_pod_but_gpuplanes_placed_ones_counts_against_its_node():
    cluster = FakeCluster(
        [gpu_node("h1"), gpu_node("h2")],
        [
            pod("web/nginx", "h1", {}, cpu_milli=2000, host_memory_mib=4096),  # CPU-only, another team's
            pod("ml/trainer", "h1", {"nvidia.com/gpu": 1}, cpu_milli=8000, host_memory_mib=65536),
            pod("serving/ours", "h1", {"nvidia.com/gpu": 1}, cpu_milli=4000, host_memory_mib=16384, labels=GPUPLANE,
                annotations={"gpuplane.io/sharing": "exclusive"}),  # held by its placement
            pod("serving/handed-over", "h1", {}, cpu_milli=1000, host_memory_mib=1024, labels=GPUPLANE,
                annotations={"gpuplane.io/sharing": "default-scheduler"}),
            pod("web/done", "h1", {}, cpu_milli=16000, phase="Succeeded"),  # finished: holds nothing
            pod("web/other-node", "h2", {}, cpu_milli=500, host_memory_mib=512),
        ],
    )
    report = sync_inventory(cluster)

    # h1: 2000 + 8000 + 1000 milli CPU; 4096 + 65536 + 1024 MiB.
    assert _requested("h1") == (11000, 70656)
    assert _requested("h2") == (500, 512)
    # A pod without GPUs is never reported as a GPU pod that fits nowhere.
    assert report.unplaced_pods == []

    cluster.pods = [p for p in cluster.pods if p.key != "ml/trainer"]
    sync_inventory(cluster)
    assert _requested("h1") == (3000, 5120)
