"""Must-show 2, the faults, each driven through ``reconcile()`` tick by tick on the simulated cluster:
an eviction a PodDisruptionBudget refuses for a while, a device plugin that never reports, a MIG
manager that fails (rollback), a do-not-disrupt pod, and no spare capacity to pre-warm. Each
asserts the cluster (labels, cordons, allocatable), the rows and the audit log."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import (
    ANNOTATION_DO_NOT_DISRUPT,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_REPLICAS,
    LABEL_MIG_CONFIG,
    LABEL_MIG_CONFIG_STATE,
    RESOURCE_GPU,
)
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.node_configs import applied_config, desired_config
from nodes.sharing.node_config import render_device_plugin_config, render_mig_parted_entries
from rollouts.choices import NodeState, OnFailure, RolloutStatus
from rollouts.creating import create_rollout, validate_request
from rollouts.models import RollingUpdate, RolloutNode
from rollouts.restoring import ACTIVE_PLACEMENTS
from scheduler.models import Deployment, Placement
from tests.rollouts.simulated import (
    EXCLUSIVE,
    MIG_2X3G,
    MPS_2,
    MPS_4,
    PluginNeverReports,
    active_placements,
    mig_ready,
    mps_cluster,
    node_named,
    ready_replicas,
    run,
    served_and_within,
    started,
    tick,
    verbs_of,
)
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

MPS_2_LABEL = render_device_plugin_config(MPS_2)[0]


# ---- a. a PodDisruptionBudget answers 429 for a while -----------------------------------------------------


def test_an_eviction_a_pdb_refuses_is_backed_off_and_retried_until_the_budget_allows_it(settings):
    settings.ROLLOUT_EVICTION_BACKOFF_S = 5
    settings.ROLLOUT_STEP_TIMEOUT_S = 120
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=0)
    # An ETL pod on gpu-1 whose budget wants one healthy pod: it cannot go before a second one is up.
    cluster.run_pod("batch", "etl-0", "gpu-1", resources={RESOURCE_GPU: 1}, gpus=[0], labels={"app": "etl"},
                    owner_kind="ReplicaSet")
    cluster.add_pdb("batch", "etl", {"app": "etl"}, min_available=1)
    sync_inventory(cluster)
    rollout = started(cluster, names=["gpu-1"])

    for _ in range(40):
        tick(cluster, clock)
    step = rollout.nodes.get()
    assert step.state == NodeState.DRAINING
    assert "disruption budget" in step.reason and step.retry_at is not None
    blocked = AuditEvent.objects.filter(verb="rolloutnode.eviction_blocked").order_by("pk")
    # Backed off: one attempt per 5 s back-off, not one per tick (40 ticks of 1 s).
    assert 4 <= blocked.count() <= 9
    assert all("batch/etl-0" in e.reason and "retrying after" in e.reason for e in blocked)
    assert node_named(cluster, "gpu-1").unschedulable
    assert "batch/etl-0" in {pod.key for pod in cluster.list_gpu_pods()}

    # A second ETL pod comes up elsewhere: the budget allows the eviction at the next retry.
    cluster.run_pod("batch", "etl-1", "gpu-2", resources={RESOURCE_GPU: 1}, gpus=[0], labels={"app": "etl"},
                    owner_kind="ReplicaSet")
    rollout = run(cluster, clock, rollout)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    evicted = AuditEvent.objects.get(verb="rolloutnode.pod_evicted")
    assert evicted.reason == "batch/etl-0 evicted through the Eviction API"
    assert evicted.pk > blocked.last().pk
    assert "batch/etl-0" not in {pod.key for pod in cluster.list_gpu_pods()}
    node = node_named(cluster, "gpu-1")
    assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_4)[0]
    assert node.allocatable[RESOURCE_GPU] == 4 and not node.unschedulable


# ---- b. the device plugin never reports -> timeout, restore, pause --------------------------------------


def test_a_plugin_that_never_reports_times_out_restores_the_label_uncordons_fails_the_node_and_pauses(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 30
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1, cluster_class=PluginNeverReports)
    rollout = started(cluster, names=["gpu-1", "gpu-2"], on_failure=OnFailure.PAUSE)
    first = rollout.nodes.get(batch_index=1)

    rollout = run(cluster, clock, rollout, check=served_and_within(cluster))

    assert rollout.status == RolloutStatus.PAUSED
    first.refresh_from_db()
    assert first.state == NodeState.FAILED
    assert first.reason == "verifying the new config took longer than 30 s"
    assert rollout.message == f"{first.node_name} failed: verifying the new config took longer than 30 s"
    node = node_named(cluster, first.node_name)
    assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL  # the previous label, restored
    assert node.labels[LABEL_GPU_REPLICAS] == "2" and node.allocatable[RESOURCE_GPU] == 2
    assert not node.unschedulable
    assert not Node.objects.get(name=first.node_name).cordoned
    # What gpuplane wants of the node followed it: the target at the switch, its old config again
    # once restored (the node page shows no change pending).
    assert desired_config(Node.objects.get(name=first.node_name)) == applied_config(Node.objects.get(name=first.node_name))
    wanted = AuditEvent.objects.filter(verb="node.desired_config_set").order_by("pk")
    assert [e.after["desired_config"]["replicas"] for e in wanted] == [4, 2]
    # The other node was never touched: pending, its labels as they were, schedulable.
    other = rollout.nodes.get(batch_index=2)
    assert other.state == NodeState.PENDING
    assert node_named(cluster, other.node_name).labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL
    assert verbs_of(first)[-3:] == ["rolloutnode.verifying", "rolloutnode.restored", "rolloutnode.failed"]
    assert "rolloutnode.labels_switched" in verbs_of(first)
    restored = AuditEvent.objects.get(verb="rolloutnode.restored", object_id=str(first.pk))
    assert restored.after["labels"][LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL
    paused = AuditEvent.objects.filter(verb="rollingupdate.paused").get()
    assert paused.reason == rollout.message
    assert active_placements() == {"svc-1": 1}


# ---- c. the MIG manager fails -> restore, and on_failure=rollback undoes the changed nodes --------------


BAD_MIG_LAYOUT = [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 8}}]  # cannot fit an H100


def test_a_mig_manager_that_fails_restores_the_node_and_rolls_back_the_nodes_already_changed():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2, start=EXCLUSIVE, sharing="auto", share_percent=None)
    mig_ready(cluster)
    exclusive_mig = render_mig_parted_entries(EXCLUSIVE)[0]
    before = {n.name: dict(n.labels) for n in cluster.list_nodes()}
    rollout = started(cluster, names=["gpu-1", "gpu-2"], config=MIG_2X3G, on_failure=OnFailure.ROLLBACK)
    first, second = rollout.nodes.get(batch_index=1), rollout.nodes.get(batch_index=2)
    check = served_and_within(cluster)
    while (first := RolloutNode.objects.get(pk=first.pk)).state != NodeState.SUCCEEDED:
        tick(cluster, clock)
        check()
    assert node_named(cluster, first.node_name).allocatable.get("nvidia.com/mig-3g.40gb") == 2
    # The MIG manager fails to apply the config on the second node (a GPU it cannot reset): it
    # reports failed. (A config of that name overwritten with another layout never gets this far:
    # the node waits untouched, test_a_config_someone_changed_keeps_the_next_node_untouched.)
    cluster.inject_mig_failure(render_mig_parted_entries(MIG_2X3G)[0], "cannot reset GPU 0: in use")

    rollout = run(cluster, clock, rollout, check=check)

    assert rollout.status == RolloutStatus.ROLLED_BACK, rollout.message
    assert rollout.message == f"{second.node_name} failed; rolled back: {first.node_name}"
    first.refresh_from_db()
    second.refresh_from_db()
    assert second.state == NodeState.FAILED and "mig.config.state=failed" in second.reason
    assert first.state == NodeState.ROLLED_BACK and first.reason.startswith("rolled back: proven at its previous")
    for name in (first.node_name, second.node_name):
        node = node_named(cluster, name)
        assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == before[name][LABEL_DEVICE_PLUGIN_CONFIG], name
        assert not node.unschedulable, name
        assert not any(key.startswith("nvidia.com/mig-") for key in node.allocatable), name
    # The rolled-back node is proven back at exclusive: the MIG manager applied the exclusive config.
    back = node_named(cluster, first.node_name)
    assert back.labels[LABEL_MIG_CONFIG] == exclusive_mig and back.labels[LABEL_MIG_CONFIG_STATE] == "success"
    assert back.allocatable[RESOURCE_GPU] == 1
    assert applied_config(Node.objects.get(name=first.node_name)) == EXCLUSIVE
    # Its second pass went through every step again, with the evictions in the audit log.
    verbs = verbs_of(first)
    back = verbs[verbs.index("rolloutnode.succeeded") + 1:]
    moves = [v for v in back if v.split(".")[1] in {s.value for s in NodeState}]
    assert moves == ["rolloutnode.prewarming", "rolloutnode.draining", "rolloutnode.reconfiguring",
                     "rolloutnode.verifying", "rolloutnode.rolled-back"]
    assert back.count("rolloutnode.labels_switched") == 1
    assert "rolloutnode.pod_evicted" in back  # drained by eviction again
    rollout_verbs = list(AuditEvent.objects.filter(object_type="rollouts.rollingupdate").order_by("pk")
                         .values_list("verb", flat=True))
    assert rollout_verbs[-2:] == ["rollingupdate.rolling_back", "rollingupdate.rolled-back"]
    assert set(active_placements().values()) == {1}
    assert min(ready_replicas(cluster).values()) == 1


# ---- d. a do-not-disrupt pod -> the node is skipped, the others succeed ---------------------------------


def test_a_do_not_disrupt_pod_skips_its_node_with_a_reason_and_the_others_succeed():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=1)
    rollout = started(cluster, names=["gpu-1", "gpu-2", "gpu-3"])
    # Arrived after the rollout was planned (the planner would have skipped the node).
    cluster.run_pod("batch", "train-0", "gpu-2", resources={RESOURCE_GPU: 1}, gpus=[0],
                    annotations={ANNOTATION_DO_NOT_DISRUPT: "true"})

    rollout = run(cluster, clock, rollout, check=served_and_within(cluster))

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert rollout.message == "every other node proven at the new config; skipped (see each reason): gpu-2"
    skipped = rollout.nodes.get(node_name="gpu-2")
    assert skipped.state == NodeState.SKIPPED
    assert skipped.reason == ("holds do-not-disrupt pod batch/train-0: gpuplane never evicts it, so the node is "
                              "skipped (nothing on it was changed)")
    assert {s.node_name for s in rollout.nodes.filter(state=NodeState.SUCCEEDED)} == {"gpu-1", "gpu-3"}
    node = node_named(cluster, "gpu-2")
    assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL and node.allocatable[RESOURCE_GPU] == 2
    assert not node.unschedulable
    assert "batch/train-0" in {pod.key for pod in cluster.list_gpu_pods()}
    assert not [e for e in AuditEvent.objects.filter(verb="rolloutnode.pod_evicted") if "gpu-2" in e.reason
                or e.object_id == str(skipped.pk)]
    assert verbs_of(skipped)[-2:] == ["rolloutnode.restored", "rolloutnode.skipped"]
    assert rollout.progress_percent == 100.0


def test_a_config_someone_changed_keeps_the_next_node_untouched_until_it_is_put_right():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2, start=EXCLUSIVE, sharing="auto", share_percent=None)
    rollout = started(cluster, names=["gpu-1", "gpu-2"], config=MIG_2X3G)  # gpuplane writes its configs itself
    first, second = rollout.nodes.get(batch_index=1), rollout.nodes.get(batch_index=2)
    while RolloutNode.objects.get(pk=first.pk).state != NodeState.SUCCEEDED:
        tick(cluster, clock)
    mig_name, entries = render_mig_parted_entries(MIG_2X3G)
    cluster.set_mig_config(mig_name, BAD_MIG_LAYOUT)  # someone's hand edit under gpuplane's name

    for _ in range(10):
        tick(cluster, clock)

    second.refresh_from_db()
    assert second.state == NodeState.PENDING
    assert second.reason.startswith("waiting to write the configs it needs before touching the node: ")
    assert f"another config named {mig_name}" in second.reason and "not overwritten" in second.reason
    node = node_named(cluster, second.node_name)
    assert not node.unschedulable and LABEL_MIG_CONFIG_STATE not in node.labels  # never cordoned, never switched
    assert RollingUpdate.objects.get(pk=rollout.pk).status == RolloutStatus.RUNNING

    cluster.set_mig_config(mig_name, entries)  # put right: the rollout goes on
    rollout = run(cluster, clock, rollout)
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message


def test_a_bare_pod_skips_its_node_as_kubectl_drain_refuses_it_and_a_replica_set_pod_is_evicted_and_recreated():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=1)
    # gpu-2 runs a pod nobody recreates; gpu-3 one its ReplicaSet recreates after the eviction.
    cluster.run_pod("dev", "notebook", "gpu-2", resources={RESOURCE_GPU: 1}, gpus=[0])
    cluster.run_pod("batch", "etl-0", "gpu-3", resources={RESOURCE_GPU: 1}, gpus=[0], labels={"app": "etl"},
                    owner_kind="ReplicaSet")
    sync_inventory(cluster)
    rollout = started(cluster, names=["gpu-1", "gpu-2", "gpu-3"])

    rollout = run(cluster, clock, rollout, check=served_and_within(cluster))

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    skipped = rollout.nodes.get(node_name="gpu-2")
    assert skipped.state == NodeState.SKIPPED
    assert skipped.reason == ("holds pod dev/notebook with no controller: an eviction would delete it for good "
                              "(kubectl drain refuses it without --force), so the node is skipped (nothing on it "
                              "was changed)")
    assert {s.node_name for s in rollout.nodes.filter(state=NodeState.SUCCEEDED)} == {"gpu-1", "gpu-3"}
    node = node_named(cluster, "gpu-2")
    assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL and not node.unschedulable
    pods = {pod.key: pod for pod in cluster.list_gpu_pods()}
    assert pods["dev/notebook"].node_name == "gpu-2" and pods["dev/notebook"].ready
    evicted = [e.reason for e in AuditEvent.objects.filter(verb="rolloutnode.pod_evicted")]
    assert "batch/etl-0 evicted through the Eviction API" in evicted
    assert not [reason for reason in evicted if "notebook" in reason]
    # The ReplicaSet's pod came back under a new name, off the node being changed.
    (etl,) = [pod for pod in pods.values() if pod.labels.get("app") == "etl"]
    assert etl.name != "etl-0" and etl.node_name not in ("", "gpu-3")
    assert verbs_of(skipped)[-2:] == ["rolloutnode.restored", "rolloutnode.skipped"]


def test_a_mirror_pod_is_left_on_its_node_as_kubectl_drain_leaves_it_and_the_node_is_changed():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=1, deployments=0)
    # A static pod the kubelet runs from a file: its mirror is owned by the Node, never evicted.
    cluster.run_pod("kube-system", "gpu-burn-gpu-1", "gpu-1", resources={RESOURCE_GPU: 1}, gpus=[0],
                    annotations={"kubernetes.io/config.mirror": "abc123"}, owner_kind="Node")
    rollout = started(cluster, names=["gpu-1"])

    rollout = run(cluster, clock, rollout)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert node_named(cluster, "gpu-1").labels[LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_4)[0]
    assert "kube-system/gpu-burn-gpu-1" in {pod.key for pod in cluster.list_gpu_pods()}
    assert not AuditEvent.objects.filter(verb="rolloutnode.pod_evicted").exists()


def test_a_do_not_disrupt_pod_arriving_while_pre_warming_gives_the_copies_up_again():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    busy = Node.objects.get(placements__isnull=False).name
    original = Placement.objects.get()
    rollout = started(cluster, names=[busy])
    step = rollout.nodes.get()
    while not (step := RolloutNode.objects.get(pk=step.pk)).progress.get("prewarmed"):
        tick(cluster, clock)
    assert active_placements() == {"svc-1": 2}  # the original and its copy elsewhere
    cluster.run_pod("batch", "train-0", busy, resources={RESOURCE_GPU: 1}, gpus=[0],
                    annotations={ANNOTATION_DO_NOT_DISRUPT: "true"})

    rollout = run(cluster, clock, rollout, check=served_and_within(cluster))

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert rollout.message.endswith(f"skipped (see each reason): {busy}")
    step.refresh_from_db()
    assert step.state == NodeState.SKIPPED and "do-not-disrupt pod batch/train-0" in step.reason
    # Nothing left doubled: the node kept its own (ready) replica, the copy was released.
    assert active_placements() == {"svc-1": 1}
    assert Deployment.objects.get().placements.get(status__in=ACTIVE_PLACEMENTS).pk == original.pk
    assert not node_named(cluster, busy).unschedulable
    assert not AuditEvent.objects.filter(verb="rolloutnode.pod_evicted").exists()
    assert list(ready_replicas(cluster).values()) == [1]


# ---- e. no spare capacity to pre-warm -> the preview says so, create and start are refused ---------------


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def fill(cluster: SimulatedCluster, node: str) -> None:
    """A pod gpuplane did not place takes the whole of ``node``'s GPU (both MPS replicas)."""
    cluster.run_pod("other", f"hog-{node}", node, resources={RESOURCE_GPU: 2}, gpus=[0])
    sync_inventory(cluster)


def test_no_spare_capacity_is_a_blocker_in_the_preview_and_a_409_at_create_with_nothing_stored(operator_api):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    busy = Node.objects.get(placements__isnull=False).name
    spare = next(n for n in ("gpu-1", "gpu-2") if n != busy)
    fill(cluster, spare)
    body = {"name": "mps4", "nodes": [busy], "config": MPS_4.as_dict()}

    shown = operator_api.post("/api/v1/rollouts/preview/", body, format="json").json()
    response = operator_api.post("/api/v1/rollouts/", body, format="json")

    assert shown["feasible"] is False and shown["blockers"]
    assert any("svc-1" in b and "cannot move" in b for b in shown["blockers"]), shown["blockers"]
    assert response.status_code == 409, response.content
    assert response.json()["reasons"] == shown["blockers"]
    assert not RollingUpdate.objects.exists()


def test_start_is_refused_when_the_capacity_vanished_and_nothing_is_touched(operator_api):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    busy = Node.objects.get(placements__isnull=False).name
    spare = next(n for n in ("gpu-1", "gpu-2") if n != busy)
    rollout = create_rollout(validate_request("update", [busy], MPS_4.as_dict()))
    before = {n.name: (dict(n.labels), n.unschedulable) for n in cluster.list_nodes()}
    fill(cluster, spare)  # the room the copy was to take is gone
    before[spare] = next((dict(n.labels), n.unschedulable) for n in cluster.list_nodes() if n.name == spare)

    response = operator_api.post(f"/api/v1/rollouts/{rollout.pk}/start/", format="json")
    for _ in range(5):
        tick(cluster, clock)  # a pending rollout is not the reconciler's

    assert response.status_code == 409, response.content
    assert "Not safe to start now" in response.json()["detail"] and "svc-1" in response.json()["detail"]
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.PENDING
    assert rollout.nodes.get().state == NodeState.PENDING
    assert {n.name: (dict(n.labels), n.unschedulable) for n in cluster.list_nodes()} == before
    assert not AuditEvent.objects.filter(object_type="rollouts.rolloutnode").exists()
    assert active_placements() == {"svc-1": 1}
