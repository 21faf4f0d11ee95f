"""The reconciler on the simulated cluster: rolling MPS, time-slicing and MIG updates that never leave
a workload unserved, and a reconciler killed mid-step that resumes. The faults are in test_faults."""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import (
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_REPLICAS,
    LABEL_MIG_CONFIG_STATE,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
)
from nodes.models import Node
from nodes.node_configs import applied_config, desired_config
from nodes.sharing.node_config import render_device_plugin_config
from rollouts import steps
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import act
from rollouts.restoring import fail_node
from scheduler.models import Deployment, Placement
from scheduler.services import moving
from tests.rollouts.simulated import (
    EXCLUSIVE,
    MIG_2X3G,
    MPS_2,
    MPS_4,
    TIMESLICE_4,
    PluginNeverReports,
    mig_ready,
    mps_cluster,
    node_named,
    ready_replicas,
    run,
    started,
    tick,
)
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


def test_a_rolling_mps_update_proves_every_node_and_never_leaves_a_workload_unserved(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 60
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=3)
    assert min(ready_replicas(cluster).values()) == 1
    rollout = started(cluster)
    samples = []

    def every_workload_served():
        served = ready_replicas(cluster)
        samples.append(served)
        assert min(served.values()) >= 1, f"a workload had no ready replica: {served}"
        unavailable = [n.name for n in Node.objects.filter(cordoned=True)]
        assert len(unavailable) <= 1, f"more than max_unavailable cordoned: {unavailable}"

    rollout = run(cluster, clock, rollout, check=every_workload_served)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert rollout.progress_percent == 100.0
    assert len(samples) > 20  # the checker ran through every step, not once
    assert {n.state for n in rollout.nodes.all()} == {NodeState.SUCCEEDED}
    label = render_device_plugin_config(MPS_4)[0]
    for node in cluster.list_nodes():
        assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == label
        assert node.labels[LABEL_GPU_REPLICAS] == "4" and node.labels[LABEL_SHARING_STRATEGY] == "mps"
        assert node.allocatable[RESOURCE_GPU] == 4
        assert not node.unschedulable
    assert all(applied_config(node) == MPS_4 for node in Node.objects.all())
    # Each node's desired config became the target as its labels switched (audited), and is met.
    assert all(desired_config(node) == MPS_4 for node in Node.objects.all())
    assert AuditEvent.objects.filter(verb="node.desired_config_set").count() == 4
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    # Pods left through the Eviction API: the audit log holds evictions, no pod delete.
    assert "rolloutnode.pod_evicted" in verbs
    assert not [v for v in verbs if "pod" in v and "evict" not in v]
    evictions = AuditEvent.objects.filter(verb="rolloutnode.pod_evicted").count()
    assert evictions >= 3  # each deployment's original replica was evicted somewhere on the way
    # Each batch is one node, in order: the audit shows no node started before the previous ended.
    starts = list(AuditEvent.objects.filter(verb="rolloutnode.prewarming").order_by("pk").values_list("pk", flat=True))
    ends = list(AuditEvent.objects.filter(verb="rolloutnode.succeeded").order_by("pk").values_list("pk", flat=True))
    assert all(end < start for end, start in zip(ends, starts[1:], strict=False))


class WorkerKilled(BaseException):
    """The worker process dies here (SIGKILL): no handler in the reconciler runs."""


class KilledOnFirstRestart(SimulatedCluster):
    """The worker dies (an uncaught error) right after the labels were switched, before the restart."""

    killed = False

    def restart_device_plugin(self, node: str) -> None:
        if not KilledOnFirstRestart.killed:
            KilledOnFirstRestart.killed = True
            raise WorkerKilled("worker killed")
        super().restart_device_plugin(node)


def test_a_reconciler_killed_mid_step_resumes_from_the_persisted_state():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1, cluster_class=KilledOnFirstRestart)
    busy = Node.objects.get(placements__isnull=False).name
    rollout = started(cluster, names=[busy])
    with pytest.raises(WorkerKilled):
        for _ in range(50):
            tick(cluster, clock)
    step = rollout.nodes.get()
    assert step.state == NodeState.RECONFIGURING
    labels = next(n for n in cluster.list_nodes() if n.name == busy).labels
    assert labels[LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_4)[0]  # switched, not restarted

    rollout = run(cluster, clock, rollout)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    # The rerun kept the labels found before the first attempt, not the half-applied ones.
    step.refresh_from_db()
    assert step.progress["previous_labels"][LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_2)[0]
    assert AuditEvent.objects.filter(verb="rolloutnode.replica_prewarmed").count() == 1
    assert list(ready_replicas(cluster).values()) == [1]
    assert applied_config(Node.objects.get(name=busy)) == MPS_4


def test_aborting_restores_a_node_part_way_changed(settings):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1, cluster_class=PluginNeverReports)
    rollout = started(cluster, names=["gpu-1"])
    for _ in range(20):
        tick(cluster, clock)
    assert rollout.nodes.get().state == NodeState.VERIFYING
    assert next(n for n in cluster.list_nodes() if n.name == "gpu-1").unschedulable

    rollout = act(rollout, "abort", actor="tester", cluster=cluster)

    assert rollout.status == RolloutStatus.ABORTED
    assert "restored gpu-1" in rollout.message
    step = rollout.nodes.get()
    assert step.state == NodeState.FAILED and step.reason == "rollout aborted"
    node = next(n for n in cluster.list_nodes() if n.name == "gpu-1")
    assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_2)[0]
    assert not node.unschedulable
    tick(cluster, clock)  # a finished rollout is left alone
    assert rollout.nodes.get().state == NodeState.FAILED


def test_a_reconciler_killed_right_after_placing_a_replica_adopts_it_instead_of_placing_another(monkeypatch):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    busy = Node.objects.get(placements__isnull=False).name
    rollout = started(cluster, names=[busy])
    tick(cluster, clock)  # pending -> prewarming
    real = moving.place_replicas

    def place_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise WorkerKilled("worker killed")

    monkeypatch.setattr(moving, "place_replicas", place_then_die)
    with pytest.raises(WorkerKilled):
        tick(cluster, clock)
    monkeypatch.setattr(moving, "place_replicas", real)

    rollout = run(cluster, clock, rollout)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    deployment = Deployment.objects.get()
    assert deployment.placements.count() == 2  # the original and one copy, never a second copy
    assert list(ready_replicas(cluster).values()) == [1]


def test_exclusive_to_time_slicing_rolls_through_without_leaving_a_workload_unserved():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2, start=EXCLUSIVE, sharing="auto", share_percent=None)
    rollout = started(cluster, names=["gpu-1", "gpu-2", "gpu-3"], config=TIMESLICE_4)

    def every_workload_served():
        assert min(ready_replicas(cluster).values()) >= 1

    rollout = run(cluster, clock, rollout, check=every_workload_served)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    for node in cluster.list_nodes():
        assert node.labels[LABEL_SHARING_STRATEGY] == "time-slicing" and node.allocatable[RESOURCE_GPU] == 4
    assert all(applied_config(node) == TIMESLICE_4 for node in Node.objects.all())


def test_a_batch_of_two_never_pre_warms_onto_a_node_of_the_same_batch(settings):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=3)
    rollout = started(cluster, max_unavailable=2)
    batches = {s.node_name: s.batch_index for s in rollout.nodes.all()}
    assert sorted(batches.values()) == [1, 1, 2, 2]

    def every_workload_served():
        assert min(ready_replicas(cluster).values()) >= 1

    rollout = run(cluster, clock, rollout, check=every_workload_served)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    for event in AuditEvent.objects.filter(verb="rolloutnode.replica_prewarmed"):
        step = rollout.nodes.get(pk=event.object_id)
        destination = Placement.objects.get(pk=event.after["new_placement"]).node.name
        assert batches[destination] != step.batch_index, f"{event.reason}: onto a node of its own batch"


def test_a_mig_layout_change_is_proven_by_mig_config_state_and_the_mig_resources():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2, start=EXCLUSIVE, sharing="auto", share_percent=None)
    mig_ready(cluster)
    rollout = started(cluster, names=["gpu-1", "gpu-2"], config=MIG_2X3G)

    def every_workload_served():
        assert min(ready_replicas(cluster).values()) >= 1

    rollout = run(cluster, clock, rollout, check=every_workload_served)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    for node in cluster.list_nodes():
        if node.name in ("gpu-1", "gpu-2"):
            assert node.labels[LABEL_MIG_CONFIG_STATE] == "success"
            assert node.allocatable.get("nvidia.com/mig-3g.40gb") == 2
    assert applied_config(Node.objects.get(name="gpu-1")) == MIG_2X3G


def test_an_error_in_one_rollout_does_not_stall_the_others(monkeypatch):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=0)
    first = started(cluster, names=["gpu-1"])
    second = started(cluster, names=["gpu-2"])
    real = steps.advance_node

    def broken_for_first(step, rollout, *args):
        if rollout.pk == first.pk:
            raise KeyError("a bug")
        return real(step, rollout, *args)

    monkeypatch.setattr("rollouts.reconciler.advance_node", broken_for_first)
    done = tick(cluster, clock)

    assert done[str(first.pk)].startswith("error: ")
    assert done[str(second.pk)] == "batch 1"
    assert second.nodes.get().state == NodeState.PREWARMING


def test_a_node_proven_at_the_new_config_stays_cordoned_until_its_health_check_passes(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 600
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    rollout = started(cluster, names=["gpu-1", "gpu-2"])
    first = rollout.nodes.get(batch_index=1)
    held_ticks = []

    def kubelet_down_while_verifying():
        first.refresh_from_db()
        node = node_named(cluster, first.node_name)
        if first.state == NodeState.VERIFYING and not held_ticks and node.allocatable.get(RESOURCE_GPU) == 4:
            # Proven (the plugin republished R=4), and now the kubelet stops reporting Ready.
            cluster.set_node_ready(first.node_name, False)
        if first.state == NodeState.VERIFYING and not node_named(cluster, first.node_name).ready:
            held_ticks.append(first.reason)
            assert node_named(cluster, first.node_name).unschedulable  # never uncordoned while NotReady
            if len(held_ticks) == 5:
                cluster.set_node_ready(first.node_name, True)

    rollout = run(cluster, clock, rollout, check=kubelet_down_while_verifying)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert len(held_ticks) == 5
    assert "health check: waiting for the node to report Ready" in held_ticks[1:]
    first.refresh_from_db()
    assert first.state == NodeState.SUCCEEDED and "Ready, uncordoned" in first.reason


def test_a_tick_that_died_between_failing_a_node_and_pausing_is_paused_by_the_next_one_once(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 600
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=1)
    rollout = started(cluster, names=["gpu-1", "gpu-2", "gpu-3"])
    first = rollout.nodes.get(batch_index=1)
    tick(cluster, clock)
    first.refresh_from_db()
    # What advance_node did before the worker died: the node restored and failed; no pause yet.
    fail_node(first, cluster, "the plugin crashed")
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.RUNNING

    tick(cluster, clock)

    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.PAUSED
    assert rollout.message == f"{first.node_name} failed: the plugin crashed"
    assert rollout.nodes.get(batch_index=2).state == NodeState.PENDING  # nothing else moved on
    # Resumed, it goes on with the other nodes and does not pause again for the same failure.
    act(rollout, "resume")
    rollout = run(cluster, clock, rollout)
    assert rollout.status == RolloutStatus.FAILED, rollout.message
    assert sorted(rollout.nodes.values_list("state", flat=True)) == [
        NodeState.FAILED, NodeState.SUCCEEDED, NodeState.SUCCEEDED]
    assert AuditEvent.objects.filter(verb="rollingupdate.paused").count() == 1
