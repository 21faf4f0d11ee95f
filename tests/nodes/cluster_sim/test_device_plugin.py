"""The simulated device plugin: its config applies only on restart, a delay after it; MPS limits; invalid configs."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodes.catalog import lookup_product
from nodes.cluster.base import ClusterError
from nodes.cluster.sim import SimulatedCluster
from nodes.sharing.device_plugin import device_plugin_config
from tests.nodes.cluster_sim.helpers import A100_80, H100, node, pods_of, workload

REPO_ROOT = Path(__file__).resolve().parents[3]


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


def plugin_pods(cluster):
    return [p for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator"]


def test_a_restarted_plugin_shows_its_config_only_after_the_restart_delay(slow_plugin_cluster, clock):
    cluster = slow_plugin_cluster
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)  # a new node's plugin is up at once
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 4}
    cluster.set_device_plugin_config("ts-4", device_plugin_config("time-slicing", 4))
    cluster.set_node_labels("gpu-1", {"nvidia.com/device-plugin.config": "ts-4"})

    cluster.restart_device_plugin("gpu-1")
    clock.advance(2.9)
    restarting = node(cluster, "gpu-1")
    # The kubelet lost the plugin: no GPU is allocatable (capacity stays); GFD still says the old config.
    assert restarting.allocatable == {"nvidia.com/gpu": 0}
    assert restarting.labels["nvidia.com/gpu.replicas"] == "1"
    assert restarting.labels["nvidia.com/gpu.sharing-strategy"] == "none"
    [pod] = plugin_pods(cluster)
    assert pod["status"]["phase"] == "Pending"
    raw = next(n for n in cluster.list_objects("Node") if n["metadata"]["name"] == "gpu-1")
    assert raw["status"]["capacity"]["nvidia.com/gpu"] == "4"
    # Nothing can be scheduled onto the node meanwhile.
    cluster.create_workload(workload(node_name="gpu-1"))
    assert pods_of(cluster, "llm")[0].phase == "Pending" and not pods_of(cluster, "llm")[0].node_name

    clock.advance(0.1)
    restarted = node(cluster, "gpu-1")
    assert restarted.allocatable == {"nvidia.com/gpu": 16}
    assert restarted.labels["nvidia.com/gpu.replicas"] == "4"
    assert restarted.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    [pod] = plugin_pods(cluster)
    assert pod["status"]["phase"] == "Running"
    assert pods_of(cluster, "llm")[0].node_name == "gpu-1"
    reasons = [e["reason"] for e in cluster.events() if e["name"] == "gpu-1"]
    assert reasons[-2:] == ["DevicePluginRestarting", "DevicePluginRestarted"]


def test_a_second_restart_during_the_delay_starts_the_wait_again(slow_plugin_cluster, clock):
    cluster = slow_plugin_cluster
    cluster.add_gpu_node("gpu-1", gpu_count=2, **H100)
    cluster.set_device_plugin_config("mps-2", device_plugin_config("mps", 2))
    cluster.set_node_labels("gpu-1", {"nvidia.com/device-plugin.config": "mps-2"})
    cluster.restart_device_plugin("gpu-1")
    clock.advance(2)
    cluster.restart_device_plugin("gpu-1")
    clock.advance(2)
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 0}
    assert len(plugin_pods(cluster)) == 1
    clock.advance(1)
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 4}


def test_the_restart_deadline_lives_in_the_state_file_for_every_process(state_path, clock):
    SimulatedCluster(state_path, clock=clock).add_gpu_node("gpu-1", gpu_count=1, **H100)
    # Another process (a worker with its own setting) restarts the plugin, 3 s to be ready.
    code = """
        import sys
        from nodes.cluster.sim import SimulatedCluster
        from nodes.sharing.device_plugin import device_plugin_config
        cluster = SimulatedCluster(sys.argv[1], clock=lambda: float(sys.argv[2]), plugin_restart_s=3)
        cluster.set_device_plugin_config("ts-4", device_plugin_config("time-slicing", 4))
        cluster.set_node_labels("gpu-1", {"nvidia.com/device-plugin.config": "ts-4"})
        cluster.restart_device_plugin("gpu-1")
    """
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(state_path), str(clock.now)],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr

    # Readers whose own setting differs (instant, or slower) see the plugin come back at the writer's deadline.
    for reader in (SimulatedCluster(state_path, clock=clock, plugin_restart_s=0),
                   SimulatedCluster(state_path, clock=clock, plugin_restart_s=60)):
        assert node(reader, "gpu-1").allocatable == {"nvidia.com/gpu": 0}
    clock.advance(3)
    assert node(SimulatedCluster(state_path, clock=clock, plugin_restart_s=60), "gpu-1").allocatable == {"nvidia.com/gpu": 4}
