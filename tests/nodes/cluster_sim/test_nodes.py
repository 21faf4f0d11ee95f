"""Simulated nodes: GFD labels, allocatable GPUs, deterministic UUIDs, labels, cordon."""

import pytest

from nodes.cluster.base import ClusterBackend, ClusterError, NotFound
from nodes.cluster.sim import SimulatedCluster, gpu_uuid
from tests.nodes.cluster_sim.helpers import A100_80, node


def test_it_is_a_cluster_backend(cluster):
    assert isinstance(cluster, ClusterBackend)


def test_a_missing_state_file_is_an_empty_cluster(cluster, state_path):
    assert not state_path.exists()
    assert cluster.is_empty()
    assert cluster.list_nodes() == [] and cluster.list_gpu_pods() == []


def test_a_gpu_node_carries_gfd_labels_allocatable_and_deterministic_uuids(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, cpu_milli=96000, memory_mib=1_048_576, **A100_80)
    cluster.add_gpu_node("l4-1", product="NVIDIA-L4", gpu_count=2, gpu_memory_mib=23034, labels={"pool": "inference"})

    a100 = node(cluster, "gpu-1")
    assert a100.ready and not a100.unschedulable
    assert a100.cpu_allocatable_milli == 96000 and a100.memory_allocatable_mib == 1_048_576
    assert a100.allocatable == {"nvidia.com/gpu": 4}
    assert a100.labels["nvidia.com/gpu.replicas"] == "1"
    assert a100.labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert a100.labels["nvidia.com/mig.capable"] == "true"
    assert [(g.index, g.product, g.memory_mib, g.mig_enabled) for g in a100.gpus] == [
        (i, "NVIDIA-A100-SXM4-80GB", 81920, False) for i in range(4)
    ]
    assert [g.uuid for g in a100.gpus] == [gpu_uuid("gpu-1", i) for i in range(4)]
    assert len({g.uuid for g in a100.gpus}) == 4 and a100.gpus[0].uuid.startswith("GPU-")

    l4 = node(cluster, "l4-1")
    assert l4.labels["nvidia.com/mig.capable"] == "false"  # the catalog knows the L4 has no MIG
    assert l4.labels["pool"] == "inference"
    assert l4.allocatable == {"nvidia.com/gpu": 2}
    assert not cluster.is_empty()


def test_uuids_depend_only_on_the_node_name(tmp_path):
    first = SimulatedCluster(tmp_path / "one.json")
    second = SimulatedCluster(tmp_path / "two.json")
    first.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    second.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    second.add_gpu_node("gpu-2", gpu_count=2, **A100_80)
    uuids = [g.uuid for g in node(first, "gpu-1").gpus]
    assert uuids == [g.uuid for g in node(second, "gpu-1").gpus]
    assert not set(uuids) & {g.uuid for g in node(second, "gpu-2").gpus}


def test_adding_a_node_twice_is_refused(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    with pytest.raises(ClusterError, match='nodes "gpu-1" already exists'):
        cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)


def test_labels_merge_and_none_removes(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, labels={"team": "a", "tier": "gold"}, **A100_80)
    cluster.set_node_labels("gpu-1", {"team": "b", "tier": None, "zone": "eu-1"})
    labels = node(cluster, "gpu-1").labels
    assert labels["team"] == "b" and labels["zone"] == "eu-1" and "tier" not in labels
    with pytest.raises(NotFound):
        cluster.set_node_labels("nope", {"a": "b"})


def test_cordon_marks_unschedulable_with_the_kubernetes_taint_and_uncordon_restores(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}], **A100_80)
    cluster.cordon("gpu-1")
    cordoned = node(cluster, "gpu-1")
    assert cordoned.unschedulable
    assert {t.key for t in cordoned.taints} == {"dedicated", "node.kubernetes.io/unschedulable"}
    cluster.uncordon("gpu-1")
    restored = node(cluster, "gpu-1")
    assert not restored.unschedulable and [t.key for t in restored.taints] == ["dedicated"]
