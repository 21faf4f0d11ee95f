"""Injected faults: the next calls of a ClusterBackend method fail, in every process."""

import pytest

from nodes.cluster.base import ClusterError
from nodes.cluster.sim import SimulatedCluster
from tests.nodes.cluster_sim.helpers import A100_80, node, pods_of, workload


def test_injected_faults_fail_the_next_calls_then_clear(cluster, state_path):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.inject_fault("create_workload", "admission webhook denied", times=2)
    for _ in range(2):
        with pytest.raises(ClusterError, match="^admission webhook denied$"):
            cluster.create_workload(workload())
    assert cluster.list_objects("Deployment") == []  # a faulted call does nothing
    cluster.create_workload(workload())
    assert len(pods_of(cluster, "llm")) == 1

    # Faults are part of the shared state: another instance sees them.
    cluster.inject_fault("list_nodes", "apiserver timeout")
    with pytest.raises(ClusterError, match="apiserver timeout"):
        SimulatedCluster(state_path).list_nodes()
    assert [n.name for n in cluster.list_nodes()] == ["gpu-1"]


def test_every_backend_method_can_fail(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    calls = {
        "list_nodes": lambda: cluster.list_nodes(),
        "list_gpu_pods": lambda: cluster.list_gpu_pods(),
        "set_node_labels": lambda: cluster.set_node_labels("gpu-1", {"a": "b"}),
        "cordon": lambda: cluster.cordon("gpu-1"),
        "uncordon": lambda: cluster.uncordon("gpu-1"),
        "evict_pod": lambda: cluster.evict_pod("ml", "x"),
        "create_workload": lambda: cluster.create_workload(workload()),
        "scale_workload": lambda: cluster.scale_workload("ml", "llm", 1),
        "delete_workload": lambda: cluster.delete_workload("ml", "llm"),
        "workload_ready": lambda: cluster.workload_ready("ml", "llm"),
        "restart_device_plugin": lambda: cluster.restart_device_plugin("gpu-1"),
        "review_token": lambda: cluster.review_token("a.b.c", ["gpuplane"]),
    }
    for operation, call in calls.items():
        cluster.inject_fault(operation, f"{operation} broke")
        with pytest.raises(ClusterError, match=f"^{operation} broke$"):
            call()
    assert not node(cluster, "gpu-1").unschedulable
    with pytest.raises(ValueError, match="unknown operation 'drain'"):
        cluster.inject_fault("drain")
