"""nodes.operator_configs: the GPU operator's ConfigMaps get the named configs node configs need,
merged in (never overwriting someone's config of the same name), checked by a dry run first; the
simulated device plugin and MIG manager then run what gpuplane wrote."""
from __future__ import annotations

import pytest
import yaml

from nodes.cluster.base import ClusterConfigMap, ClusterError, Conflict
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEVICE_PLUGIN_CONFIG, LABEL_MIG_CONFIG, LABEL_MIG_CONFIG_STATE, RESOURCE_GPU
from nodes.operator_configs import check_configs, needed_configs, write_configs
from nodes.sharing.device_plugin import DEVICE_PLUGIN_CONFIGMAP, device_plugin_config
from nodes.sharing.mig_parted import MIG_PARTED_CONFIGMAP
from nodes.sharing.node_config import NodeConfig, node_labels

NS = "gpu-operator"
TS8 = NodeConfig.of("timeslice", 8)
MIG = NodeConfig.of("mig", None, {"3g.40gb": 2})
H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def sim(tmp_path) -> SimulatedCluster:
    cluster = SimulatedCluster(str(tmp_path / "state"), mig_reconfigure_s=0, plugin_restart_s=0)
    cluster.set_device_plugin_config("team-config", device_plugin_config("mps", 3))  # someone else's entry
    cluster.add_gpu_node("h100", product=H100, gpu_count=2, gpu_memory_mib=81559)
    return cluster


def plugin_entries(cluster) -> dict:
    return {k: yaml.safe_load(v) for k, v in cluster.read_configmap(NS, DEVICE_PLUGIN_CONFIGMAP).data.items()}


def test_what_configs_need_mig_parted_entries_only_on_mig_capable_nodes():
    needed = needed_configs([(TS8, False), (MIG, True)])
    assert set(needed.device_plugin) == {"gpuplane-timeslice-8", "gpuplane-mig-mixed"}
    assert needed.mig_parted == {"gpuplane-mig-2x3g.40gb": [{"devices": "all", "mig-enabled": True,
                                                              "mig-devices": {"3g.40gb": 2}}]}
    assert needed_configs([(TS8, True)]).mig_parted == {"all-disabled": [{"devices": "all", "mig-enabled": False}]}


def test_written_configs_are_merged_in_once_and_the_device_plugin_and_mig_manager_run_them(sim):
    needed = needed_configs([(TS8, True), (MIG, True)])
    report = check_configs(sim, needed)
    assert report.problems == () and set(report.to_write) == {"gpuplane-timeslice-8", "gpuplane-mig-mixed",
                                                               "all-disabled", "gpuplane-mig-2x3g.40gb"}
    assert sim.read_configmap(NS, MIG_PARTED_CONFIGMAP) is None  # the check wrote nothing

    assert set(write_configs(sim, needed)) == set(report.to_write)
    assert write_configs(sim, needed) == []  # all there now: nothing written again
    assert check_configs(sim, needed).present == report.to_write
    entries = plugin_entries(sim)
    assert entries["team-config"] == device_plugin_config("mps", 3)  # kept as it was
    assert entries["gpuplane-timeslice-8"] == device_plugin_config("time-slicing", 8)

    sim.set_node_labels("h100", node_labels(TS8, mig_capable=True))
    sim.restart_device_plugin("h100")
    node = sim.list_nodes()[0]
    assert node.allocatable[RESOURCE_GPU] == 16 and node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == "gpuplane-timeslice-8"
    sim.set_node_labels("h100", node_labels(MIG, mig_capable=True))
    sim.restart_device_plugin("h100")
    node = sim.list_nodes()[0]
    assert node.labels[LABEL_MIG_CONFIG] == "gpuplane-mig-2x3g.40gb" and node.labels[LABEL_MIG_CONFIG_STATE] == "success"
    assert node.allocatable["nvidia.com/mig-3g.40gb"] == 4


def test_someone_else_s_config_under_the_same_name_is_never_overwritten(sim):
    sim.set_device_plugin_config("gpuplane-timeslice-8", device_plugin_config("time-slicing", 2))
    needed = needed_configs([(TS8, False)])

    [problem] = check_configs(sim, needed).problems
    assert "has another config named gpuplane-timeslice-8" in problem
    with pytest.raises(ClusterError, match="not overwritten"):
        write_configs(sim, needed)
    assert plugin_entries(sim)["gpuplane-timeslice-8"] == device_plugin_config("time-slicing", 2)


def test_a_write_that_cannot_be_made_is_a_problem_in_the_check_and_an_error_in_the_write(sim):
    sim.inject_fault("write_configmap", "HTTP 403 Forbidden", times=2)
    needed = needed_configs([(TS8, False)])
    [problem] = check_configs(sim, needed).problems
    assert problem.startswith("cannot write gpuplane-timeslice-8 into ConfigMap gpu-operator/") and "403" in problem
    with pytest.raises(ClusterError, match="403"):
        write_configs(sim, needed)


class WrittenMeanwhile(SimulatedCluster):
    """Someone else writes the ConfigMap between gpuplane's read and its first write."""

    raced = False

    def write_configmap(self, configmap: ClusterConfigMap, *, dry_run: bool = False) -> None:
        if not self.raced and not dry_run:
            self.raced = True
            current = self.read_configmap(configmap.namespace, configmap.name)
            super().write_configmap(ClusterConfigMap(current.namespace, current.name,
                                                     {**current.data, "late": "version: v1\n"},
                                                     current.labels, current.resource_version))
        super().write_configmap(configmap, dry_run=dry_run)


def test_a_write_that_lost_a_race_reads_again_and_merges_again(tmp_path):
    sim = WrittenMeanwhile(str(tmp_path / "state"))
    sim.set_device_plugin_config("team-config", device_plugin_config("mps", 3))

    assert write_configs(sim, needed_configs([(TS8, False)])) == ["gpuplane-timeslice-8"]
    assert set(plugin_entries(sim)) == {"team-config", "late", "gpuplane-timeslice-8"}
    assert sim.raced


def test_a_race_lost_every_time_gives_up_with_the_conflict(tmp_path, monkeypatch):
    sim = SimulatedCluster(str(tmp_path / "state"))

    def always_stale(configmap, *, dry_run=False):
        raise Conflict("HTTP 409 Conflict: the object has been modified")

    monkeypatch.setattr(sim, "write_configmap", always_stale)
    with pytest.raises(Conflict):
        write_configs(sim, needed_configs([(TS8, False)]))
    assert sim.read_configmap(NS, DEVICE_PLUGIN_CONFIGMAP) is None
