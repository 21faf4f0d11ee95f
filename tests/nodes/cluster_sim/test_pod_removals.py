"""The event record tells how every pod left: evicted, deleted directly, by its controller, or with its owner."""

import pytest

from nodes.cluster.base import NotFound
from nodes.cluster.sim.objects import REMOVAL_REASONS
from tests.nodes.cluster_sim.helpers import A100_80, pods_of, workload


def removals(cluster):
    return [(e["reason"], e["name"], e["ready"]) for e in cluster.events() if e["reason"] in REMOVAL_REASONS]


def test_each_way_a_pod_can_leave_is_its_own_event_with_its_readiness(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.create_workload(workload(node_name="gpu-1", replicas=3))
    clock.advance(2)
    first, second, third = sorted(p.name for p in pods_of(cluster, "llm"))

    cluster.evict_pod("ml", first)
    cluster.delete_pod("ml", second)
    assert removals(cluster) == [("Evicted", f"ml/{first}", True), ("Deleted", f"ml/{second}", True)]

    # The ReplicaSet recreated both (Pending, not ready yet); scaling down removes an unready one first.
    cluster.scale_workload("ml", "llm", 2)
    reason, name, ready = removals(cluster)[-1]
    assert reason == "SuccessfulDelete" and not ready and name != f"ml/{third}"

    cluster.delete_workload("ml", "llm")
    gone = removals(cluster)[-2:]
    assert {reason for reason, _, _ in gone} == {"GarbageCollected"}
    assert (f"ml/{third}", True) in {(name, ready) for _, name, ready in gone}
    assert not pods_of(cluster, "llm")


def test_a_changed_pod_template_replaces_the_pods_through_the_controller(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.create_workload(workload(node_name="gpu-1"))
    clock.advance(2)
    [pod] = pods_of(cluster, "llm")
    cluster.create_workload(workload(node_name="gpu-1", **{"nvidia.com/gpu": 2}))
    assert removals(cluster)[-1] == ("SuccessfulDelete", f"ml/{pod.name}", True)


def test_restarting_the_device_plugin_deletes_its_pod_directly(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.restart_device_plugin("gpu-1")
    [(reason, name, ready)] = removals(cluster)
    assert reason == "Deleted" and name.startswith("gpu-operator/nvidia-device-plugin-daemonset-") and ready


def test_deleting_an_unknown_pod_is_not_found(cluster):
    with pytest.raises(NotFound, match='pods "nope" not found in namespace ml'):
        cluster.delete_pod("ml", "nope")
