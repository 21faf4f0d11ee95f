"""The simulated cluster behaves like Kubernetes + NVIDIA's device plugin, GFD and MIG manager.

Everything is read back through the ClusterBackend (list_nodes / list_gpu_pods), i.e. through the
same parser a real cluster's JSON goes through.
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodes.catalog import lookup_product
from nodes.cluster.base import ClusterBackend, ClusterError, EvictionBlocked, NotFound, WorkloadSpec
from nodes.cluster.sim import SimulatedCluster, gpu_uuid, mig_uuid
from nodes.mig import plan_layout
from nodes.sharing import device_plugin_config

REPO_ROOT = Path(__file__).resolve().parents[2]
A100_80 = dict(product="NVIDIA-A100-SXM4-80GB", gpu_memory_mib=81920)
H100 = dict(product="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81559)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def state_path(tmp_path):
    return tmp_path / "cluster.json"


@pytest.fixture
def cluster(state_path, clock):
    return SimulatedCluster(state_path, clock=clock, pod_ready_delay_s=2.0, mig_reconfigure_s=5.0)


def node(cluster, name):
    return next(n for n in cluster.list_nodes() if n.name == name)


def pods_of(cluster, workload):
    return [p for p in cluster.list_gpu_pods() if p.labels.get("app.kubernetes.io/name") == workload]


def raw_pod(cluster, name):
    return next(p for p in cluster.list_objects("Pod") if p["metadata"]["name"] == name)


def workload(name="llm", node_name="gpu-1", replicas=1, **resources):
    return WorkloadSpec(
        namespace="ml",
        name=name,
        node_name=node_name,
        image="vllm/vllm-openai:v0.6",
        replicas=replicas,
        resources=resources or {"nvidia.com/gpu": 1},
    )


def gpu(count):
    return {"nvidia.com/gpu": count}


# --- nodes and GFD --------------------------------------------------------------------------------


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


# --- device plugin --------------------------------------------------------------------------------


def test_a_device_plugin_config_applies_only_when_the_plugin_restarts(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.set_device_plugin_config("ts-4", device_plugin_config("time-slicing", 4))
    cluster.set_node_labels("gpu-1", {"nvidia.com/device-plugin.config": "ts-4"})

    unchanged = node(cluster, "gpu-1")
    assert unchanged.allocatable == {"nvidia.com/gpu": 4}
    assert unchanged.labels["nvidia.com/gpu.replicas"] == "1"
    assert unchanged.labels["nvidia.com/gpu.sharing-strategy"] == "none"
    plugin_pods = [p["metadata"]["name"] for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator"]

    cluster.restart_device_plugin("gpu-1")
    shared = node(cluster, "gpu-1")
    assert shared.allocatable == {"nvidia.com/gpu": 16}  # 4 GPUs x 4 replicas
    assert shared.labels["nvidia.com/gpu.replicas"] == "4"
    assert shared.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert shared.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"  # renameByDefault false
    assert lookup_product(shared.labels["nvidia.com/gpu.product"]).key == "A100-SXM4-80GB"
    # The plugin pod was deleted and its DaemonSet created a new one.
    new_plugin_pods = [p["metadata"]["name"] for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator"]
    assert len(new_plugin_pods) == 1 and new_plugin_pods != plugin_pods

    cluster.set_node_labels("gpu-1", {"nvidia.com/device-plugin.config": None})
    cluster.restart_device_plugin("gpu-1")
    back = node(cluster, "gpu-1")
    assert back.allocatable == {"nvidia.com/gpu": 4}
    assert back.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert back.labels["nvidia.com/gpu.sharing-strategy"] == "none"


def test_mps_sets_the_sharing_strategy_label(cluster):
    cluster.set_device_plugin_config("mps-3", device_plugin_config("mps", 3))
    # A node that starts with the label gets the config from its first plugin pod.
    cluster.add_gpu_node("gpu-1", gpu_count=2, labels={"nvidia.com/device-plugin.config": "mps-3"}, **H100)
    mps = node(cluster, "gpu-1")
    assert mps.labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert mps.allocatable == {"nvidia.com/gpu": 6}


def test_restarting_with_an_unknown_config_fails_and_changes_nothing(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.set_node_labels("gpu-1", {"nvidia.com/device-plugin.config": "missing"})
    with pytest.raises(ClusterError, match="config 'missing' is not in ConfigMap"):
        cluster.restart_device_plugin("gpu-1")
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 2}


def test_an_invalid_device_plugin_config_is_refused(cluster):
    bad = {"version": "v1", "sharing": {"timeSlicing": {"failRequestsGreaterThanOne": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}}
    with pytest.raises(ClusterError, match="device plugin config bad: .*integer >= 2"):
        cluster.set_device_plugin_config("bad", bad)


def test_mps_beyond_the_client_limit_of_the_gpu_fails_the_restart(cluster):
    cluster.add_gpu_node("v100-1", product="Tesla-V100-SXM2-32GB", gpu_count=1, gpu_memory_mib=32768)
    cluster.set_device_plugin_config("mps-20", device_plugin_config("mps", 20))
    cluster.set_node_labels("v100-1", {"nvidia.com/device-plugin.config": "mps-20"})
    with pytest.raises(ClusterError, match="at most 16 clients per GPU on compute capability 7.0"):
        cluster.restart_device_plugin("v100-1")
    assert node(cluster, "v100-1").labels["nvidia.com/gpu.sharing-strategy"] == "none"


# --- MIG manager ----------------------------------------------------------------------------------


def test_mig_reconfiguration_goes_pending_then_success_with_the_planned_layout(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **H100)
    counts = {"3g.40gb": 1, "2g.20gb": 2}
    cluster.set_mig_config(
        "node-a", [{"devices": [0, 1], "mig-enabled": True, "mig-devices": counts}, {"devices": [2, 3], "mig-enabled": False}]
    )
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "node-a"})

    clock.advance(4.9)
    pending = node(cluster, "gpu-1")
    assert pending.labels["nvidia.com/mig.config.state"] == "pending"
    assert not pending.unschedulable  # the MIG manager does not cordon
    assert pending.allocatable == {"nvidia.com/gpu": 4} and not any(g.mig_enabled for g in pending.gpus)

    clock.advance(0.1)
    done = node(cluster, "gpu-1")
    assert done.labels["nvidia.com/mig.config.state"] == "success"
    planned = plan_layout(lookup_product("NVIDIA-H100-80GB-HBM3"), counts)
    for index in (0, 1):
        assert done.gpus[index].mig_enabled
        assert [(d.profile, d.start, d.size, d.uuid) for d in done.gpus[index].mig_devices] == [
            (p.profile, p.start, p.size, mig_uuid("gpu-1", index, p.profile, p.start)) for p in planned
        ]
    assert not done.gpus[2].mig_enabled and not done.gpus[3].mig_enabled
    # Mixed strategy: instances are their own resources; whole GPUs drop by the two MIG GPUs.
    assert done.allocatable == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 4}

    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-disabled"})
    clock.advance(5)
    disabled = node(cluster, "gpu-1")
    assert disabled.labels["nvidia.com/mig.config.state"] == "success"
    assert disabled.allocatable == {"nvidia.com/gpu": 4} and not any(g.mig_enabled for g in disabled.gpus)


@pytest.mark.parametrize(
    "mig_devices",
    [
        {"3g.40gb": 2, "1g.10gb": 1},  # the seed's layout: two 3g take all 8 memory slices
        {"3g.20gb": 1},  # an A100-40GB profile on an H100
    ],
)
def test_an_invalid_layout_fails_and_keeps_the_previous_layout(cluster, clock, mig_devices):
    cluster.add_gpu_node("gpu-1", gpu_count=1, labels={"nvidia.com/mig.config": "all-1g"}, **H100)
    cluster.set_mig_config("all-1g", [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}])
    clock.advance(5)
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 7}

    cluster.set_mig_config("bad", [{"devices": [0], "mig-enabled": True, "mig-devices": mig_devices}])
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "bad"})
    clock.advance(5)
    failed = node(cluster, "gpu-1")
    assert failed.labels["nvidia.com/mig.config.state"] == "failed"
    assert [d.profile for d in failed.gpus[0].mig_devices] == ["1g.10gb"] * 7
    assert failed.allocatable == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 7}
    assert cluster.events()[-1]["reason"] == "MIGConfigFailed"


def test_an_unknown_mig_config_name_fails(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **H100)
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "nope"})
    clock.advance(5)
    assert node(cluster, "gpu-1").labels["nvidia.com/mig.config.state"] == "failed"


def test_a_malformed_mig_config_is_refused(cluster):
    with pytest.raises(ClusterError, match="mig-enabled must be true or false"):
        cluster.set_mig_config("bad", [{"devices": [0], "mig-enabled": "yes"}])


def test_mps_refuses_mig_enabled_gpus(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=1, labels={"nvidia.com/mig.config": "all-enabled"}, **H100)
    clock.advance(5)
    cluster.set_device_plugin_config("mps-2", device_plugin_config("mps", 2))
    cluster.set_node_labels("gpu-1", {"nvidia.com/device-plugin.config": "mps-2"})
    with pytest.raises(ClusterError, match="MPS shares only full GPUs, and GPU 0 has MIG enabled"):
        cluster.restart_device_plugin("gpu-1")


# --- scheduling and readiness ------------------------------------------------------------------


def test_a_pinned_pod_binds_and_becomes_ready_after_the_delay(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.create_workload(workload(replicas=2))
    pods = pods_of(cluster, "llm")
    assert [(p.node_name, p.phase, p.ready, p.owner_kind) for p in pods] == [("gpu-1", "Pending", False, "ReplicaSet")] * 2
    assert not cluster.workload_ready("ml", "llm")

    clock.advance(1.9)
    assert not cluster.workload_ready("ml", "llm")
    clock.advance(0.1)
    assert [(p.phase, p.ready) for p in pods_of(cluster, "llm")] == [("Running", True)] * 2
    assert cluster.workload_ready("ml", "llm")


def test_a_pod_that_does_not_fit_stays_pending_with_the_schedulers_reason(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.run_pod("other", "trainer", "gpu-1", resources=gpu(1), gpus=[0])
    cluster.create_workload(workload(replicas=2))  # 2 pods x 1 GPU, 1 GPU free
    clock.advance(2)
    pods = pods_of(cluster, "llm")
    assert sorted((p.node_name, p.phase) for p in pods) == [("", "Pending"), ("gpu-1", "Running")]
    pending = next(p for p in pods if not p.node_name)
    scheduled = next(c for c in raw_pod(cluster, pending.name)["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert not cluster.workload_ready("ml", "llm")

    cluster.scale_workload("ml", "llm", 1)  # the unscheduled pod goes first
    assert [p.node_name for p in pods_of(cluster, "llm")] == ["gpu-1"]
    assert cluster.workload_ready("ml", "llm")


def test_a_pod_asking_for_a_missing_resource_stays_pending(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.create_workload(workload(**{"nvidia.com/mig-3g.40gb": 1}))
    assert pods_of(cluster, "llm")[0].node_name == ""


def test_a_cordoned_node_takes_no_pods_until_uncordoned(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.cordon("gpu-1")
    cluster.create_workload(workload())
    clock.advance(10)
    [pod] = pods_of(cluster, "llm")
    assert pod.node_name == "" and pod.phase == "Pending"
    assert "1 node(s) were unschedulable" in raw_pod(cluster, pod.name)["status"]["conditions"][0]["message"]

    cluster.uncordon("gpu-1")
    assert pods_of(cluster, "llm")[0].node_name == "gpu-1"
    clock.advance(2)
    assert cluster.workload_ready("ml", "llm")


def test_a_not_ready_node_takes_no_pods(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.set_node_ready("gpu-1", False)
    assert not node(cluster, "gpu-1").ready
    cluster.create_workload(workload())
    assert pods_of(cluster, "llm")[0].node_name == ""


def test_unpinned_pods_skip_tainted_and_full_nodes(cluster):
    cluster.add_gpu_node("gpu-a", gpu_count=1, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], **A100_80)
    cluster.add_gpu_node("gpu-b", gpu_count=1, **A100_80)
    cluster.create_workload(workload(node_name=None, replicas=2))
    pods = pods_of(cluster, "llm")
    assert sorted(p.node_name for p in pods) == ["", "gpu-b"]
    pending = next(p for p in pods if not p.node_name)
    assert raw_pod(cluster, pending.name)["status"]["conditions"][0]["message"] == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_a_pod_pinned_to_a_tainted_node_stays_pending(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, taints=[{"key": "maintenance", "effect": "NoExecute"}], **A100_80)
    cluster.create_workload(workload())
    assert pods_of(cluster, "llm")[0].node_name == ""


def test_a_shared_gpu_refuses_a_request_for_several_replicas(cluster):
    cluster.set_device_plugin_config("ts-4", device_plugin_config("time-slicing", 4))
    cluster.add_gpu_node("gpu-1", gpu_count=2, labels={"nvidia.com/device-plugin.config": "ts-4"}, **A100_80)
    cluster.create_workload(workload(**gpu(2)))
    [pod] = pods_of(cluster, "llm")
    assert (pod.node_name, pod.phase) == ("gpu-1", "Failed")
    assert raw_pod(cluster, pod.name)["status"]["reason"] == "UnexpectedAdmissionError"


def test_scale_and_delete(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.create_workload(workload(replicas=1))
    cluster.scale_workload("ml", "llm", 3)
    assert len(pods_of(cluster, "llm")) == 3
    assert len({p.name for p in pods_of(cluster, "llm")}) == 3
    clock.advance(2)
    assert cluster.workload_ready("ml", "llm")

    cluster.delete_workload("ml", "llm")
    assert pods_of(cluster, "llm") == []
    with pytest.raises(NotFound):
        cluster.workload_ready("ml", "llm")
    with pytest.raises(NotFound):
        cluster.scale_workload("ml", "llm", 1)
    with pytest.raises(NotFound):
        cluster.delete_workload("ml", "llm")


def test_creating_an_existing_workload_applies_it(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.create_workload(workload())
    [first] = pods_of(cluster, "llm")
    cluster.create_workload(workload())  # same spec: nothing to do
    assert [p.name for p in pods_of(cluster, "llm")] == [first.name]
    changed = workload()
    changed.image = "vllm/vllm-openai:v0.7"
    cluster.create_workload(changed)  # new template: pods replaced
    [second] = pods_of(cluster, "llm")
    assert second.name != first.name
    [deployment] = cluster.list_objects("Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.7"


def test_a_workload_with_no_replicas_is_ready(cluster):
    cluster.create_workload(workload(replicas=0))
    assert cluster.workload_ready("ml", "llm")


# --- evictions ------------------------------------------------------------------------------------


def test_evictions_honour_pod_disruption_budgets(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.add_gpu_node("gpu-2", gpu_count=2, **A100_80)
    cluster.create_workload(workload(node_name=None, replicas=2))
    clock.advance(2)
    cluster.add_pdb("ml", "llm-pdb", {"app.kubernetes.io/name": "llm"}, min_available=2)
    victim = pods_of(cluster, "llm")[0]

    with pytest.raises(EvictionBlocked, match=r"^Cannot evict pod as it would violate the pod's disruption budget\.$"):
        cluster.evict_pod("ml", victim.name)
    assert victim.name in {p.name for p in pods_of(cluster, "llm")}

    cluster.add_pdb("ml", "llm-pdb", {"app.kubernetes.io/name": "llm"}, min_available=1)
    cluster.cordon(victim.node_name)
    cluster.evict_pod("ml", victim.name)
    pods = pods_of(cluster, "llm")
    # The ReplicaSet replaced the evicted pod under a new name, on the node that is not cordoned.
    assert victim.name not in {p.name for p in pods} and len(pods) == 2
    replacement = next(p for p in pods if p.phase == "Pending")
    assert replacement.node_name != victim.node_name and replacement.node_name
    # Only one pod is healthy now: the budget forbids evicting it until the replacement is ready.
    survivor = next(p for p in pods if p.ready)
    with pytest.raises(EvictionBlocked):
        cluster.evict_pod("ml", survivor.name)
    clock.advance(2)
    cluster.evict_pod("ml", survivor.name)


def test_an_unready_pod_may_be_evicted_while_the_budget_holds(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    for name in ("a", "b"):
        cluster.run_pod("ml", name, "gpu-1", resources=gpu(1), labels={"app": "x"})
    cluster.run_pod("ml", "c", "gpu-1", resources=gpu(1), labels={"app": "x"}, ready=False)
    cluster.add_pdb("ml", "x", {"app": "x"}, min_available=2)
    with pytest.raises(EvictionBlocked):
        cluster.evict_pod("ml", "a")
    cluster.evict_pod("ml", "c")
    assert {p.name for p in cluster.list_gpu_pods()} == {"a", "b"}


def test_a_pod_under_two_budgets_cannot_be_evicted(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.run_pod("ml", "a", "gpu-1", resources=gpu(1), labels={"app": "x", "tier": "1"})
    cluster.add_pdb("ml", "by-app", {"app": "x"}, min_available=0)
    cluster.add_pdb("ml", "by-tier", {"tier": "1"}, min_available=0)
    with pytest.raises(ClusterError, match="more than one PodDisruptionBudget"):
        cluster.evict_pod("ml", "a")


def test_daemonset_pods_are_not_evicted(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.run_pod("kube-system", "dcgm-exporter-x1", "gpu-1", resources=gpu(0), owner_kind="DaemonSet")
    with pytest.raises(ClusterError, match="managed by a DaemonSet") as excinfo:
        cluster.evict_pod("kube-system", "dcgm-exporter-x1")
    assert not isinstance(excinfo.value, EvictionBlocked)
    plugin = next(p for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator")
    with pytest.raises(ClusterError, match="managed by a DaemonSet"):
        cluster.evict_pod("gpu-operator", plugin["metadata"]["name"])
    with pytest.raises(NotFound):
        cluster.evict_pod("ml", "ghost")


def test_run_pod_records_gpuplane_annotations_and_counts_against_capacity(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.run_pod("ml", "big", "gpu-1", resources=gpu(3), gpus=[0, 1, 2], share_milli=500, mig_start=4)
    [pod] = cluster.list_gpu_pods()
    assert (pod.phase, pod.ready, pod.gpu_requests) == ("Running", True, {"nvidia.com/gpu": 3})
    assert pod.annotations == {"gpuplane.io/gpus": "0,1,2", "gpuplane.io/share-milli": "500", "gpuplane.io/mig-start": "4"}
    cluster.create_workload(workload(**gpu(2)))
    assert pods_of(cluster, "llm")[0].node_name == ""


# --- faults ----------------------------------------------------------------------------------------


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
    }
    for operation, call in calls.items():
        cluster.inject_fault(operation, f"{operation} broke")
        with pytest.raises(ClusterError, match=f"^{operation} broke$"):
            call()
    assert not node(cluster, "gpu-1").unschedulable
    with pytest.raises(ValueError, match="unknown operation 'drain'"):
        cluster.inject_fault("drain")


# --- persistence ----------------------------------------------------------------------------------


def test_two_instances_on_one_file_share_the_cluster(state_path, clock):
    writer = SimulatedCluster(state_path, clock=clock)
    reader = SimulatedCluster(state_path, clock=clock)
    writer.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    reader.cordon("gpu-1")
    assert node(writer, "gpu-1").unschedulable
    writer.reset()
    assert reader.is_empty()


def test_a_clock_may_be_a_callable(state_path):
    now = [100.0]
    cluster = SimulatedCluster(state_path, clock=lambda: now[0], pod_ready_delay_s=5)
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.create_workload(workload())
    assert not cluster.workload_ready("ml", "llm")
    now[0] += 5
    assert cluster.workload_ready("ml", "llm")


def test_a_corrupt_state_file_is_reported(state_path):
    state_path.write_text("{not json")
    with pytest.raises(ClusterError, match="is corrupt"):
        SimulatedCluster(state_path).list_nodes()


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO_ROOT)


def test_another_process_sees_and_makes_changes(state_path):
    code = """
        import sys
        from nodes.cluster.sim import SimulatedCluster
        SimulatedCluster(sys.argv[1]).add_gpu_node("from-child", product="NVIDIA-L4", gpu_count=2, gpu_memory_mib=23034)
    """
    assert _python(code, str(state_path)).wait(timeout=30) == 0
    [child_node] = SimulatedCluster(state_path).list_nodes()
    assert child_node.name == "from-child" and child_node.allocatable == {"nvidia.com/gpu": 2}
    assert json.loads(state_path.read_text())["nodes"]["from-child"]["kind"] == "Node"


def test_concurrent_writers_in_two_processes_lose_no_update(state_path):
    SimulatedCluster(state_path).add_gpu_node("gpu-1", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
    # Each writer waits for the other to be up, so the two loops really overlap.
    code = """
        import pathlib, sys, time
        from nodes.cluster.sim import SimulatedCluster
        path, me, other = sys.argv[1:]
        cluster = SimulatedCluster(path)
        pathlib.Path(f"{path}.{me}.up").touch()
        deadline = time.monotonic() + 20
        while not pathlib.Path(f"{path}.{other}.up").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        for i in range(20):
            cluster.set_node_labels("gpu-1", {f"writer-{me}/n{i}": str(i)})
    """
    writers = [_python(code, str(state_path), me, other) for me, other in (("a", "b"), ("b", "a"))]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    labels = node(SimulatedCluster(state_path), "gpu-1").labels
    assert {key for key in labels if key.startswith("writer-")} == {f"writer-{w}/n{i}" for w in "ab" for i in range(20)}
