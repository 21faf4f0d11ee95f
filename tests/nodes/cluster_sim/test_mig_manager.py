"""The simulated MIG manager: pending -> success with the planned layout, or failed keeping the old one."""

import pytest

from nodes.catalog import lookup_product
from nodes.cluster.base import ClusterError
from nodes.cluster.sim import mig_uuid
from nodes.mig import plan_layout
from nodes.sharing.device_plugin import device_plugin_config
from tests.nodes.cluster_sim.helpers import H100, node


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
    # It pauses the device plugin while it works: the kubelet shows no allocatable GPUs.
    assert pending.allocatable == {"nvidia.com/gpu": 0} and not any(g.mig_enabled for g in pending.gpus)
    assert not [p for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator"]

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
    # Failed, then the plugin started again on the layout that stayed.
    assert [e["reason"] for e in cluster.events()[-2:]] == ["MIGConfigFailed", "DevicePluginRestarted"]


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


def test_mig_config_state_success_comes_before_the_restarted_plugin_shows_the_instances(slow_plugin_cluster, clock):
    cluster = slow_plugin_cluster
    cluster.add_gpu_node("gpu-1", gpu_count=2, **H100)
    cluster.set_mig_config("all-3g", [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}])
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-3g"})

    clock.advance(5)
    applied = node(cluster, "gpu-1")
    assert applied.labels["nvidia.com/mig.config.state"] == "success"
    assert all(g.mig_enabled for g in applied.gpus)
    # The plugin pod the MIG manager started again is not ready yet: nothing allocatable.
    assert applied.allocatable == {"nvidia.com/gpu": 0}
    [plugin] = [p for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator"]
    assert plugin["status"]["phase"] == "Pending"

    clock.advance(2.9)
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 0}
    clock.advance(0.1)
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 0, "nvidia.com/mig-3g.40gb": 4}


def test_a_failure_injected_for_one_layout_fails_its_next_application_only(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **H100)
    cluster.add_gpu_node("gpu-2", gpu_count=1, **H100)
    cluster.set_mig_config("all-3g", [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}])
    cluster.set_mig_config("all-7g", [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}])
    cluster.inject_mig_failure("all-3g", "nvidia-smi: GPU 0 is in use by another client")

    # Another layout is unaffected.
    cluster.set_node_labels("gpu-2", {"nvidia.com/mig.config": "all-7g"})
    clock.advance(5)
    assert node(cluster, "gpu-2").labels["nvidia.com/mig.config.state"] == "success"

    # A valid layout that would fit fails, keeping the GPUs as they were.
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-3g"})
    clock.advance(5)
    failed = node(cluster, "gpu-1")
    assert failed.labels["nvidia.com/mig.config.state"] == "failed"
    assert not failed.gpus[0].mig_enabled and failed.allocatable == {"nvidia.com/gpu": 1}
    assert any(e["reason"] == "MIGConfigFailed" and "GPU 0 is in use" in e["message"] for e in cluster.events())

    # The fault is spent: the same layout applied again succeeds.
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-disabled"})
    clock.advance(5)
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-3g"})
    assert node(cluster, "gpu-1").labels["nvidia.com/mig.config.state"] == "pending"
    clock.advance(5)
    done = node(cluster, "gpu-1")
    assert done.labels["nvidia.com/mig.config.state"] == "success"
    assert done.allocatable == {"nvidia.com/gpu": 0, "nvidia.com/mig-3g.40gb": 2}


def test_a_failure_cannot_be_injected_zero_times(cluster):
    with pytest.raises(ValueError, match="times must be >= 1"):
        cluster.inject_mig_failure("all-3g", times=0)


def test_a_plugin_restarted_while_the_mig_manager_works_comes_back_with_the_new_config_after_it(
    slow_plugin_cluster, clock
):
    cluster = slow_plugin_cluster
    cluster.add_gpu_node("gpu-1", gpu_count=1, **H100)
    cluster.set_device_plugin_config("mig-single", device_plugin_config("none", mig_strategy="single"))
    cluster.set_mig_config("all-3g", [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}])
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-3g", "nvidia.com/device-plugin.config": "mig-single"})
    cluster.restart_device_plugin("gpu-1")  # the DaemonSet is paused: no pod until the MIG manager is done
    assert not [p for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator"]

    clock.advance(5)
    assert node(cluster, "gpu-1").allocatable == {"nvidia.com/gpu": 0}
    clock.advance(3)
    done = node(cluster, "gpu-1")
    # The config asked for during the pause: migStrategy single, each instance an nvidia.com/gpu.
    assert done.labels["nvidia.com/mig.strategy"] == "single"
    assert done.allocatable == {"nvidia.com/gpu": 2}
