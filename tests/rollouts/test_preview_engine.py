"""The preview asks the placement engine where each moved workload goes, and reads the pods that block a drain.

The pure planner still batches and measures the capacity dip; where a workload goes is the engine's
dry run, in the order the reconciler pre-warms. So a workload the planner's milli-GPU best fit would
place, but the engine refuses (GPU memory, MIG geometry), is a blocker with the engine's reason, and
the node the preview names is the node execution pre-warms the copy on.
"""
from __future__ import annotations

import pytest
from django.test import Client

from lifecycle.models import AuditEvent
from nodes.contract import ANNOTATION_DO_NOT_DISRUPT, RESOURCE_GPU
from nodes.inventory.sync import sync_inventory
from nodes.sharing.node_config import NodeConfig
from rollouts.choices import RolloutStatus
from rollouts.creating import RolloutRefused, create_rollout, validate_request
from rollouts.models import RollingUpdate
from rollouts.preview import preview
from rollouts.steps import REPLICA_PREWARMED
from scheduler.models import Deployment, Placement
from tests.rollouts.cluster import nodes, replica
from tests.rollouts.simulated import MPS_4, mps_cluster, run, served_and_within, started
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

TIMESLICE_4 = NodeConfig.of("timeslice", 4)


def test_a_workload_the_milli_best_fit_would_place_but_the_engine_refuses_is_a_blocker_with_the_engines_reason():
    (source,) = nodes("h100-a", gpu_count=1)
    nodes("l4-a", gpu_model="L4", gpu_count=2, gpu_memory_mib=23034)  # two free GPUs of 24 GB each
    big = replica(source, "llm")
    Deployment.objects.filter(pk=big.deployment_id).update(memory_mib=60 * 1024)  # needs an 80 GB GPU

    shown = preview(["h100-a"], TIMESLICE_4)

    # Counted in milli-GPUs the L4 node has room (the planner's best fit would move it there) ...
    assert [(m.workload, m.destination) for m in shown.plan.moves] == [("default/llm", "l4-a")]
    # ... but the engine, as a deploy would, finds no GPU with the memory: a blocker, with its reason.
    [move] = shown.moves
    assert move.refused and move.destination is None
    assert not shown.safe
    [blocker] = shown.blockers
    assert blocker.startswith("default/llm on h100-a cannot move: ")
    assert "memory" in blocker and "0/2 nodes are available" in blocker, blocker
    assert shown.as_dict()["refusals"] == [{"workload": "default/llm", "node": "h100-a", "reason": move.reason}]
    with pytest.raises(RolloutRefused):
        create_rollout(validate_request("ts4", ["h100-a"], TIMESLICE_4.as_dict()))


def test_a_mig_instance_no_other_node_offers_is_a_blocker():
    (source,) = nodes("a100-a", gpu_model="A100-SXM4-40GB", gpu_count=1)
    nodes("h100-b", gpu_count=2)  # whole free GPUs: room by milli-GPUs, but no MIG instance at all
    mig = replica(source, "tiny", share_milli=142)
    Deployment.objects.filter(pk=mig.deployment_id).update(sharing="mig", memory_mib=4 * 1024)

    shown = preview(["a100-a"], TIMESLICE_4)

    assert [m.destination for m in shown.plan.moves] == ["h100-b"]
    [move] = shown.moves
    assert move.refused and "1 node is in a sharing mode the request does not accept" in move.reason, move.reason
    assert not shown.safe


def test_the_node_the_preview_names_is_where_execution_pre_warms_each_copy():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=3)
    busy = sorted({p.node.name for p in Placement.objects.select_related("node")})
    assert len(busy) >= 2, busy  # at least two batches that move workloads

    shown = preview(busy, MPS_4, cluster=cluster)
    assert shown.safe, shown.blockers
    planned = {m.workload: (m.source, m.destination) for m in shown.moves}
    assert len(planned) == 3 and all(destination for _, destination in planned.values())

    rollout = run(cluster, clock, started(cluster, names=busy), check=served_and_within(cluster))

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    executed = {}
    for event in AuditEvent.objects.filter(verb=REPLICA_PREWARMED).order_by("pk"):
        old = Placement.objects.select_related("node", "deployment").get(pk=event.after["old_placement"])
        new = Placement.objects.select_related("node").get(pk=event.after["new_placement"])
        executed[f"{old.deployment.namespace}/{old.workload_name}"] = (old.node.name, new.node.name)
    assert executed == planned


def test_the_pods_that_will_block_a_drain_are_listed_per_node_and_the_nodes_marked_to_be_skipped(operator):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=0)
    cluster.run_pod("batch", "train-0", "gpu-1", resources={RESOURCE_GPU: 1}, gpus=[0],
                    labels={ANNOTATION_DO_NOT_DISRUPT: "true"}, owner_kind="ReplicaSet")
    cluster.run_pod("dev", "notebook", "gpu-2", resources={RESOURCE_GPU: 1}, gpus=[0])
    # Left alone by a drain, so blocking nothing: a DaemonSet pod, a mirror pod, a ReplicaSet pod.
    cluster.run_pod("ops", "dcgm", "gpu-3", resources={RESOURCE_GPU: 1}, gpus=[0], owner_kind="DaemonSet")
    cluster.run_pod("kube-system", "burn-gpu-3", "gpu-3", resources={RESOURCE_GPU: 1}, gpus=[0],
                    annotations={"kubernetes.io/config.mirror": "abc"}, owner_kind="Node")
    cluster.run_pod("batch", "etl-0", "gpu-4", resources={RESOURCE_GPU: 1}, gpus=[0], owner_kind="ReplicaSet")
    sync_inventory(cluster)
    names = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]

    data = preview(names, MPS_4, cluster=cluster).as_dict()

    assert data["feasible"] is True and data["blockers"] == []  # it blocks those nodes, not the rollout
    assert data["drain_blockers"] == [
        {"node": "gpu-1", "pods": [{"pod": "batch/train-0", "kind": "do-not-disrupt"}],
         "reason": "holds do-not-disrupt pod batch/train-0: gpuplane never evicts it, so the node is skipped "
                   "(nothing on it will be changed)"},
        {"node": "gpu-2", "pods": [{"pod": "dev/notebook", "kind": "bare"}],
         "reason": "holds pod dev/notebook with no controller: an eviction would delete it for good (kubectl drain "
                   "refuses it without --force), so the node is skipped (nothing on it will be changed)"},
    ]
    assert any(line.startswith("  gpu-1: to be skipped at its turn") for line in data["explanation"])

    # The API answers the same, and the form's preview shows it.
    client = Client()
    client.force_login(operator)
    api = client.post("/api/v1/rollouts/preview/", {"name": "mps4", "nodes": names, "config": MPS_4.as_dict()},
                      content_type="application/json")
    assert api.status_code == 200, api.content
    assert api.json()["drain_blockers"] == data["drain_blockers"]
    page = client.post("/rollouts/new/", {"name": "mps4", "nodes": names, "mode": "mps", "replicas": "4",
                                          "mig_layout": "", "strategy": "rolling", "max_unavailable": "1",
                                          "on_failure": "pause", "preview": "1"}).content.decode()
    assert 'id="preview-drain-blockers"' in page
    assert "gpu-1: <code>batch/train-0</code> (do-not-disrupt)" in page
    assert "gpu-2: <code>dev/notebook</code> (bare)" in page
    assert not RollingUpdate.objects.exists()
