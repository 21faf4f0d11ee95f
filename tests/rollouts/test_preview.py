"""The preview's view of the cluster: what counts as a workload, as capacity, as a place to move to."""
from __future__ import annotations

import pytest

from nodes.models import Node
from nodes.sharing.node_config import NodeConfig
from rollouts.preview import cluster_for_planning, preview
from scheduler.choices import PlacementStatus
from tests.rollouts.cluster import nodes, replica

pytestmark = pytest.mark.django_db

TIMESLICE_4 = NodeConfig.of("timeslice", 4)


def test_cordoned_or_unready_nodes_never_receive_moved_workloads():
    a, b, c = nodes("gpu-a", "gpu-b", "gpu-c")
    replica(a, "chat")
    Node.objects.filter(pk=b.pk).update(cordoned=True)
    Node.objects.filter(pk=c.pk).update(ready=False)

    shown = preview(["gpu-a"], TIMESLICE_4)

    assert not shown.safe
    assert shown.plan.refusals[0].reason == "no other schedulable node"


def test_released_placements_hold_nothing_and_multi_gpu_replicas_hold_each_gpu():
    (a,) = nodes("gpu-a", gpu_count=4)
    replica(a, "wide", share_milli=500, gpus=2)
    gone = replica(a, "old", share_milli=500)
    gone.status = PlacementStatus.RELEASED
    gone.save(update_fields=["status"])

    (node,) = cluster_for_planning()

    assert [(w.key, w.size_milli) for w in node.workloads] == [("default/wide", 1000)]
    # "old" still shows in the GPU counters here, so it counts as a foreign pod's capacity.
    assert node.capacity_milli == 4000 - 500


def test_the_applied_config_is_what_the_planner_compares():
    nodes("gpu-a", sharing_mode="timeslice", sharing_replicas=4)
    nodes("gpu-b", sharing_mode="timeslice", sharing_replicas=2)

    shown = preview(["gpu-a", "gpu-b"], TIMESLICE_4)

    assert [s.node for s in shown.plan.skipped] == ["gpu-a"]
    assert [b.nodes for b in shown.plan.batches] == [("gpu-b",)]
    assert shown.as_dict()["config"] == {"mode": "timeslice", "replicas": 4, "mig_layout": None}
