"""Issue 18, must-show 2 (rollouts): on the demo cluster, rollouts succeed with their configs written
first, and a rollout that cannot succeed is refused at preview and create, before any cordon.

The demo's ConfigMaps hold only the configs its nodes run (``gpuplane-mps-2``, ``-mps-4``,
``-timeslice-4`` and two demo MIG layouts); each rollout here needs one they lack. The cluster
records the order of the calls that change it, so "written first" is checked, not assumed.
"""
from __future__ import annotations

from collections import Counter

import pytest
import yaml
from django.conf import settings
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from nodes.cluster.base import ClusterConfigMap
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEVICE_PLUGIN_CONFIG, LABEL_MIG_CONFIG, RESOURCE_GPU, RESOURCE_MIG_PREFIX
from nodes.demo import load_demo_cluster
from nodes.inventory.sync import sync_inventory
from nodes.sharing.device_plugin import DEVICE_PLUGIN_CONFIGMAP
from nodes.sharing.mig_parted import MIG_PARTED_CONFIGMAP, MIG_PARTED_CONFIGMAP_KEY
from nodes.sharing.node_config import NodeConfig, device_plugin_config_name, mig_config_name
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from rollouts.models import RollingUpdate
from scheduler import services
from scheduler.services import DeploySpec
from tests.rollouts.simulated import active_placements, run
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

URL = "/api/v1/rollouts/"
OPERATOR_NAMESPACE = "gpu-operator"


class Recording(SimulatedCluster):
    """The simulated cluster, noting each call that changes it: ("write", names) / ("cordon", node) / ("label", node)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, str]] = []

    def write_configmap(self, configmap: ClusterConfigMap, *, dry_run: bool = False) -> None:
        super().write_configmap(configmap, dry_run=dry_run)
        if not dry_run:
            self.calls.append(("write", configmap.name))

    def cordon(self, node: str) -> None:
        self.calls.append(("cordon", node))
        super().cordon(node)

    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.calls.append(("label", node))
        super().set_node_labels(node, labels)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def demo(clock) -> Recording:
    load_demo_cluster()
    return Recording(settings.GPUPLANE_SIMULATED_STATE, clock=clock, pod_ready_delay_s=2.0)


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def plugin_configs(cluster: SimulatedCluster) -> dict[str, dict]:
    stored = cluster.read_configmap(OPERATOR_NAMESPACE, DEVICE_PLUGIN_CONFIGMAP)
    return {name: yaml.safe_load(text) for name, text in stored.data.items()}


def mig_configs(cluster: SimulatedCluster) -> dict[str, list]:
    stored = cluster.read_configmap(OPERATOR_NAMESPACE, MIG_PARTED_CONFIGMAP)
    return yaml.safe_load(stored.data[MIG_PARTED_CONFIGMAP_KEY])["mig-configs"]


def other_teams_pods(cluster: SimulatedCluster) -> Counter:
    """Ready pods per app of the demo's other teams (a pod recreated after an eviction has a new name)."""
    return Counter(pod.labels["app.kubernetes.io/name"] for pod in cluster.list_gpu_pods()
                   if pod.ready and "app.kubernetes.io/name" in pod.labels and pod.namespace != "default")


CASES = {
    "time-slicing x8": ("h100-node-4", NodeConfig.of("timeslice", 8), {RESOURCE_GPU: 64}),
    "a MIG layout": ("a100-node-7", NodeConfig.of("mig", None, {"3g.20gb": 2}), {f"{RESOURCE_MIG_PREFIX}3g.20gb": 16}),
    "exclusive": ("h100-node-4", NodeConfig.of("exclusive"), {RESOURCE_GPU: 8}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_rollout_the_demo_lacks_the_config_for_writes_it_first_and_succeeds(demo, clock, case):
    node, target, proof = CASES[case]
    name = device_plugin_config_name(target)
    assert name not in plugin_configs(demo)  # the bug of issue 18: nothing wrote it
    # A gpuplane replica on the node too, so the rollout pre-warms one as well as evicting others' pods.
    for other in {n.name for n in demo.list_nodes()} - {node}:
        demo.cordon(other)
    sync_inventory(demo)
    services.deploy(DeploySpec(name="svc", model="m", memory_gb=4, sharing="auto"), cluster=demo)
    for other in {n.name for n in demo.list_nodes()} - {node}:
        demo.uncordon(other)
    clock.advance(3)
    sync_inventory(demo)
    pods_before = other_teams_pods(demo)
    demo.calls.clear()

    request = validate_request("demo", [node], target.as_dict())
    assert request.preview(demo).safe, request.preview(demo).blockers
    rollout = run(demo, clock, act(create_rollout(request, cluster=demo), "start", cluster=demo), ticks=120)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert rollout.nodes.get().state == NodeState.SUCCEEDED
    # Written before the node was first cordoned or labelled; what the device plugin now runs is that config.
    first_touch = next(i for i, call in enumerate(demo.calls) if call[0] in ("cordon", "label"))
    assert ("write", DEVICE_PLUGIN_CONFIGMAP) in demo.calls[:first_touch]
    assert name in plugin_configs(demo)
    proven = next(n for n in demo.list_nodes() if n.name == node)
    assert proven.labels[LABEL_DEVICE_PLUGIN_CONFIG] == name and not proven.unschedulable
    assert {key: proven.allocatable.get(key) for key in proof} == proof
    if target.mode == "mig":
        assert mig_configs(demo)[mig_config_name(target)] == [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]
        assert proven.labels[LABEL_MIG_CONFIG] == mig_config_name(target)
    written = AuditEvent.objects.get(verb="rollingupdate.configs_written")
    assert name in written.after["written"]
    # Nothing lost: every other team's pod runs again (elsewhere), gpuplane's replica too.
    clock.advance(5)
    assert other_teams_pods(demo) == pods_before
    assert active_placements() == {"svc": 1}
    assert AuditEvent.objects.filter(verb="rolloutnode.replica_prewarmed").count() == 1


def test_a_rollout_that_would_lose_a_workload_is_refused_at_preview_and_create_before_any_cordon(demo, operator_api):
    # Issue 18's rollout: h100-node-1's 4-GPU fine-tune (another team's) would be evicted, and the
    # default scheduler would bind it to a time-sliced or MPS node whose plugin refuses it.
    body = {"name": "ts8", "nodes": ["h100-node-1"], "config": {"mode": "timeslice", "replicas": 8}}
    configs_before = plugin_configs(demo)

    preview = operator_api.post(URL + "preview/", body, format="json")
    created = operator_api.post(URL, body, format="json")

    assert preview.status_code == 200 and preview.json()["feasible"] is False
    [reason] = preview.json()["blockers"]
    assert reason.startswith("training/llama3-70b-finetune-0 on h100-node-1 (not placed by gpuplane) would be evicted")
    assert "refuses a pod asking for 4 nvidia.com/gpu" in reason and "a100-node-1" in reason
    assert created.status_code == 409 and created.json()["reasons"] == [reason]
    assert not RollingUpdate.objects.exists()
    assert not any(n.unschedulable for n in demo.list_nodes())
    assert plugin_configs(demo) == configs_before  # a preview writes nothing (a dry run only)


def test_a_mig_layout_the_gpu_model_cannot_hold_is_refused_at_preview_and_create(demo, operator_api):
    body = {"name": "mig", "nodes": ["a100-node-7"], "config": {"mode": "mig", "mig_layout": {"3g.40gb": 2}}}

    for url in (URL + "preview/", URL):
        answer = operator_api.post(url, body, format="json")
        assert answer.status_code == 400
        [message] = answer.json()["config"]["mig_layout"]
        assert message.startswith("A100-SXM4-40GB (a100-node-7): ")
    assert not RollingUpdate.objects.exists()


def test_configs_the_cluster_will_not_take_refuse_the_rollout_at_preview_and_create(demo, operator_api):
    demo.inject_fault("write_configmap", "HTTP 403 Forbidden: cannot update configmaps", times=10)
    body = {"name": "ts8", "nodes": ["h100-node-4"], "config": {"mode": "timeslice", "replicas": 8}}

    preview = operator_api.post(URL + "preview/", body, format="json").json()
    created = operator_api.post(URL, body, format="json")

    assert preview["feasible"] is False and preview["configs"]["to_write"] == []
    assert any("gpuplane-timeslice-8" in b and "403 Forbidden" in b for b in preview["blockers"])
    assert created.status_code == 409
    assert not RollingUpdate.objects.exists() and not any(n.unschedulable for n in demo.list_nodes())


def test_two_batches_where_the_first_moves_a_workload_onto_the_second_s_node_preview_as_unsafe(demo, clock,
                                                                                               operator_api):
    # Issue 18: a100-node-3 then a100-node-1 -> MPS x4. A 30 % MPS workload needs a slot on R <= 3:
    # batch 1 moves it from a100-node-3 onto a100-node-1 (R=2), and batch 2 then has nowhere for it.
    def deploy_only_on(node: str, spec: DeploySpec) -> None:
        others = {n.name for n in demo.list_nodes()} - {node}
        for other in others:
            demo.cordon(other)
        sync_inventory(demo)
        services.deploy(spec, cluster=demo)
        for other in others:
            demo.uncordon(other)
        clock.advance(3)
        sync_inventory(demo)

    deploy_only_on("a100-node-3", DeploySpec(name="mps-30pct", model="m", memory_gb=4, sharing="mps", share_percent=30))
    deploy_only_on("a100-node-1", DeploySpec(name="small", model="m", memory_gb=4, sharing="mps", share_percent=25,
                                             replicas=2))
    body = {"name": "mps4", "nodes": ["a100-node-3", "a100-node-1"], "config": {"mode": "mps", "replicas": 4}}

    shown = operator_api.post(URL + "preview/", body, format="json").json()
    created = operator_api.post(URL, body, format="json")

    assert [batch["nodes"] for batch in shown["batches"]] == [["a100-node-3"], ["a100-node-1"]]
    assert [(m["source"], m["destination"]) for m in shown["batches"][0]["moves"]] == [("a100-node-3", "a100-node-1")]
    assert shown["feasible"] is False
    [blocker] = shown["blockers"]
    assert blocker.startswith("default/mps-30pct-") and " on a100-node-1 cannot move: " in blocker
    assert created.status_code == 409 and not RollingUpdate.objects.exists()
