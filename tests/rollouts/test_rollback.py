"""on_failure=rollback on the simulated cluster: the changed nodes go back latest batch first, the
nodes not started are skipped, and a rollback cut by a crash resumes from the rows. (The MIG
manager's failure that triggers a rollback is in test_faults.)"""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEVICE_PLUGIN_CONFIG, LABEL_GPU_REPLICAS, RESOURCE_GPU
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import render_device_plugin_config
from rollouts.choices import NodeState, OnFailure, RolloutStatus
from rollouts.control import act
from rollouts.models import RollingUpdate, RolloutNode
from rollouts.steps import rolling_back
from tests.rollouts.simulated import (
    MPS_2,
    MPS_4,
    active_placements,
    mps_cluster,
    node_named,
    run,
    served_and_within,
    started,
    tick,
    verbs_of,
)
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

MPS_2_LABEL = render_device_plugin_config(MPS_2)[0]


class PluginBrokenOn(SimulatedCluster):
    """The device plugin on the nodes in ``broken`` never picks up a new config."""

    broken: set[str] = set()

    def restart_device_plugin(self, node: str) -> None:
        if node not in PluginBrokenOn.broken:
            super().restart_device_plugin(node)


def test_rollback_undoes_the_changed_nodes_latest_first_and_skips_those_not_started(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 30
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=3, cluster_class=PluginBrokenOn)
    rollout = started(cluster, on_failure=OnFailure.ROLLBACK)
    steps = {s.batch_index: s for s in rollout.nodes.all()}
    assert sorted(steps) == [1, 2, 3, 4]
    PluginBrokenOn.broken = {steps[3].node_name}
    try:
        rollout = run(cluster, clock, rollout, ticks=400, check=served_and_within(cluster))
    finally:
        PluginBrokenOn.broken = set()

    assert rollout.status == RolloutStatus.ROLLED_BACK, rollout.message
    state = {i: RolloutNode.objects.get(pk=s.pk) for i, s in steps.items()}
    assert [state[i].state for i in (1, 2, 3, 4)] == [NodeState.ROLLED_BACK, NodeState.ROLLED_BACK,
                                                      NodeState.FAILED, NodeState.SKIPPED]
    assert state[3].reason == "verifying the new config took longer than 30 s"
    assert state[4].reason.startswith(f"not started: the rollout rolls back after {steps[3].node_name} failed")
    # Only the skipped node is done (left alone, with its reason); rolled back and failed ones are not: 1 of 4.
    assert rollout.progress_percent == 25.0
    assert "rolloutnode.labels_switched" not in verbs_of(state[4])
    for node in cluster.list_nodes():  # every node at MPS R=2 again, proven, schedulable
        assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL, node.name
        assert node.labels[LABEL_GPU_REPLICAS] == "2" and node.allocatable[RESOURCE_GPU] == 2, node.name
        assert not node.unschedulable, node.name
    assert all(applied_config(node) == MPS_2 for node in Node.objects.all())
    # Latest batch first: batch 2's node was rolled back before batch 1's.
    rolled = list(AuditEvent.objects.filter(verb="rolloutnode.rolled-back").order_by("pk")
                  .values_list("object_id", flat=True))
    assert rolled == [str(steps[2].pk), str(steps[1].pk)]
    assert set(active_placements().values()) == {1}


class WorkerKilled(BaseException):
    """The worker process dies here (SIGKILL): no handler in the reconciler runs."""


class KilledWhileRollingBack(PluginBrokenOn):
    """Dies on the first label switch of the rollback (the labels written, the plugin not yet restarted)."""

    armed = False

    def restart_device_plugin(self, node: str) -> None:
        if KilledWhileRollingBack.armed:
            KilledWhileRollingBack.armed = False
            raise WorkerKilled("worker killed")
        super().restart_device_plugin(node)


def test_a_rollback_cut_by_a_crash_resumes_from_the_rows_and_ends_rolled_back(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 30
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1, cluster_class=KilledWhileRollingBack)
    rollout = started(cluster, names=["gpu-1", "gpu-2"], on_failure=OnFailure.ROLLBACK)
    first, second = rollout.nodes.get(batch_index=1), rollout.nodes.get(batch_index=2)
    PluginBrokenOn.broken = {second.node_name}
    try:
        while not RollingUpdate.objects.get(pk=rollout.pk).message.startswith("rolling back"):
            tick(cluster, clock)
        KilledWhileRollingBack.armed = True
        with pytest.raises(WorkerKilled):
            for _ in range(100):
                tick(cluster, clock)
        first.refresh_from_db()
        assert first.state == NodeState.RECONFIGURING and first.progress["rollback"] is True
        assert node_named(cluster, first.node_name).labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL  # switched back

        rollout = run(cluster, clock, rollout, check=served_and_within(cluster))
    finally:
        PluginBrokenOn.broken = set()

    assert rollout.status == RolloutStatus.ROLLED_BACK, rollout.message
    first.refresh_from_db()
    assert first.state == NodeState.ROLLED_BACK
    # The rerun kept the labels found before the rollback's switch (the rollout's config).
    assert first.progress["previous_labels"][LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_4)[0]
    node = node_named(cluster, first.node_name)
    assert node.allocatable[RESOURCE_GPU] == 2 and not node.unschedulable
    assert active_placements() == {"svc-1": 1}


def test_a_batch_of_two_rolls_back_together_and_a_sibling_part_way_changed_is_stopped_and_restored(
        settings, viewer_api, viewer):
    settings.ROLLOUT_STEP_TIMEOUT_S = 30
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=2, cluster_class=PluginBrokenOn)
    rollout = started(cluster, max_unavailable=2, on_failure=OnFailure.ROLLBACK)
    batches = {s.node_name: s.batch_index for s in rollout.nodes.all()}
    second = sorted(name for name, batch in batches.items() if batch == 2)
    PluginBrokenOn.broken = set(second)  # both nodes of batch 2 wait for a plugin that never reports
    try:
        rollout = run(cluster, clock, rollout, ticks=400, check=served_and_within(cluster, max_cordoned=2))
    finally:
        PluginBrokenOn.broken = set()

    assert rollout.status == RolloutStatus.ROLLED_BACK, rollout.message
    rows = {s.node_name: s for s in rollout.nodes.all()}
    failed = [n for n in second if rows[n].state == NodeState.FAILED]
    stopped = [n for n in second if rows[n].state == NodeState.ROLLED_BACK]
    assert len(failed) == 1 and len(stopped) == 1  # the first to time out failed; its sibling was stopped
    assert rows[stopped[0]].reason.startswith(f"stopped part-way and restored (previous labels, uncordoned): "
                                              f"rollback after {failed[0]} failed")
    for name, batch in batches.items():
        if batch == 1:
            assert rows[name].state == NodeState.ROLLED_BACK and rows[name].reason.startswith("rolled back: proven")
    for node in cluster.list_nodes():
        assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL and not node.unschedulable, node.name
    # Batch 1 went back together: both its nodes started rolling back before either was done.
    starts = [e.pk for e in AuditEvent.objects.filter(verb="rolloutnode.prewarming", reason__startswith="rolling back")]
    ends = [e.pk for e in AuditEvent.objects.filter(verb="rolloutnode.rolled-back", reason__startswith="rolled back:")]
    assert len(starts) == 2 and len(ends) == 2 and max(starts) < min(ends)
    assert set(active_placements().values()) == {1}

    # The API and the page say so: rolled-back, each node's state and reason.
    body = viewer_api.get(f"/api/v1/rollouts/{rollout.pk}/").json()
    assert body["status"] == "rolled-back" and body["message"] == rollout.message
    assert {n["node"]: (n["state"], n["reason"]) for n in body["nodes"]} == {
        name: (row.state, row.reason) for name, row in rows.items()}
    viewer_api.force_authenticate(None)
    viewer_api.force_login(viewer)
    page = viewer_api.get(f"/rollouts/{rollout.pk}/").content.decode()
    assert "Rolled back" in page and "stopped part-way and restored" in page


def test_a_node_that_cannot_be_rolled_back_is_left_at_the_new_config_and_the_rollout_ends_failed(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 30
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=0, cluster_class=PluginBrokenOn)
    rollout = started(cluster, names=["gpu-1", "gpu-2"], on_failure=OnFailure.ROLLBACK)
    first, second = rollout.nodes.get(batch_index=1), rollout.nodes.get(batch_index=2)
    PluginBrokenOn.broken = {second.node_name}
    try:
        while not RollingUpdate.objects.get(pk=rollout.pk).message.startswith("rolling back"):
            tick(cluster, clock)
        # A pod nobody may disrupt lands on the node to roll back: it stays at the rollout's config.
        cluster.run_pod("batch", "train-0", first.node_name, resources={RESOURCE_GPU: 1}, gpus=[0],
                        annotations={"gpuplane.io/do-not-disrupt": "true"})
        rollout = run(cluster, clock, rollout)
    finally:
        PluginBrokenOn.broken = set()

    assert rollout.status == RolloutStatus.FAILED
    assert rollout.message == (f"{second.node_name} failed; rolled back: none (nothing else had changed); "
                               f"could not roll back: {first.node_name}")
    first.refresh_from_db()
    assert first.state == NodeState.SKIPPED and "left at the rollout's config" in first.reason
    node = node_named(cluster, first.node_name)
    assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_4)[0]
    assert node.allocatable[RESOURCE_GPU] == 4 and not node.unschedulable
    assert "batch/train-0" in {pod.key for pod in cluster.list_gpu_pods()}


def test_a_rollout_paused_while_rolling_back_stands_still_and_rolls_back_on_when_resumed(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 30
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1, cluster_class=PluginBrokenOn)
    rollout = started(cluster, names=["gpu-1", "gpu-2"], on_failure=OnFailure.ROLLBACK)
    first, second = rollout.nodes.get(batch_index=1), rollout.nodes.get(batch_index=2)
    PluginBrokenOn.broken = {second.node_name}
    try:
        while (first := RolloutNode.objects.get(pk=first.pk)).state != NodeState.DRAINING or not rolling_back(first):
            tick(cluster, clock)
        rollout = act(rollout, "pause", actor="tester", cluster=cluster)
        for _ in range(10):
            tick(cluster, clock)
        assert RolloutNode.objects.get(pk=first.pk).state == NodeState.DRAINING  # a paused rollout stands still
        assert node_named(cluster, first.node_name).unschedulable  # still owned by the paused rollout

        rollout = run(cluster, clock, act(rollout, "resume", actor="tester", cluster=cluster))
    finally:
        PluginBrokenOn.broken = set()

    assert rollout.status == RolloutStatus.ROLLED_BACK, rollout.message
    assert RolloutNode.objects.get(pk=first.pk).state == NodeState.ROLLED_BACK
    assert AuditEvent.objects.filter(verb="rollingupdate.rolling_back").count() == 2  # announced again on resume
    node = node_named(cluster, first.node_name)
    assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL and not node.unschedulable
    assert active_placements() == {"svc-1": 1}


class KilledAtCall(PluginBrokenOn):
    """The worker dies at the ``countdown``-th cluster call: before it reaches the cluster, or right
    after it landed (``after``), before the reconciler could note it."""

    countdown: int | None = None
    after = False

    def _operate(self, operation, action):
        if KilledAtCall.countdown is not None:
            KilledAtCall.countdown -= 1
            if KilledAtCall.countdown == 0:
                KilledAtCall.countdown = None
                if KilledAtCall.after:
                    super()._operate(operation, action)
                raise WorkerKilled(f"worker killed at {operation}")
        return super()._operate(operation, action)


# Call numbers within the rollback of gpu-1 (about 25 calls): the sync as pre-warming waits, the
# eviction, the old replica's workload deleted, the label switch, the uncordon.
@pytest.mark.parametrize(("call", "after"), [(6, True), (14, False), (15, True), (18, True), (23, False)])
def test_a_worker_killed_anywhere_in_a_rollback_leaves_it_resumable_to_the_same_end(settings, call, after):
    settings.ROLLOUT_STEP_TIMEOUT_S = 30
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1, cluster_class=KilledAtCall)
    rollout = started(cluster, names=["gpu-1", "gpu-2"], on_failure=OnFailure.ROLLBACK)
    first, second = rollout.nodes.get(batch_index=1), rollout.nodes.get(batch_index=2)
    PluginBrokenOn.broken = {second.node_name}
    try:
        while not RollingUpdate.objects.get(pk=rollout.pk).message.startswith("rolling back"):
            tick(cluster, clock)
        KilledAtCall.countdown, KilledAtCall.after = call, after
        with pytest.raises(WorkerKilled):
            for _ in range(100):
                tick(cluster, clock)
        rollout = run(cluster, clock, rollout, check=served_and_within(cluster))
    finally:
        PluginBrokenOn.broken = set()
        KilledAtCall.countdown = None

    assert rollout.status == RolloutStatus.ROLLED_BACK, rollout.message
    assert RolloutNode.objects.get(pk=first.pk).state == NodeState.ROLLED_BACK
    assert RolloutNode.objects.get(pk=second.pk).state == NodeState.FAILED
    for node in cluster.list_nodes():
        assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_LABEL and node.allocatable[RESOURCE_GPU] == 2
        assert not node.unschedulable, node.name
    assert not Node.objects.filter(cordoned=True).exists()
    assert active_placements() == {"svc-1": 1}
    assert AuditEvent.objects.filter(verb="rolloutnode.labels_switched", object_id=str(first.pk)).count() in (2, 3)
