"""A reconciler killed at a point a random kill rarely hits: between reserving a pre-warmed copy and
creating its workload. The next tick must not adopt the reservation (its pod never comes, and the
step would wait until it times out): it gives it back and places a fresh copy.

(tests/rollouts/test_crash_safety.py kills real worker processes at random points; this pins the
narrowest window deterministically, in process.)
"""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from nodes.contract import LABEL_MIG_CONFIG, LABEL_MIG_CONFIG_STATE
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.sharing.node_config import mig_config_name, render_mig_parted_entries
from rollouts import restoring
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment
from scheduler.services import placing
from tests.rollouts.simulated import (
    EXCLUSIVE,
    MIG_2X3G,
    MPS_4,
    mig_ready,
    mps_cluster,
    node_named,
    ready_replicas,
    started,
    tick,
)
from tests.scheduler.inventory import FakeClock, check_invariants

pytestmark = pytest.mark.django_db


class WorkerKilled(BaseException):
    """The worker process dies here (SIGKILL): no handler or ``finally`` of placing runs."""


def test_a_copy_reserved_by_a_tick_that_died_before_creating_its_workload_is_given_back_and_placed_afresh(
        monkeypatch):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    busy = Node.objects.get(placements__isnull=False).name
    rollout = act(create_rollout(validate_request("r", [busy], MPS_4.as_dict())), "start", cluster=cluster)
    tick(cluster, clock)  # pending -> prewarming

    def die(*args, **kwargs):
        raise WorkerKilled("worker killed after the reservation committed")

    monkeypatch.setattr(placing, "_start", die)
    with pytest.raises(WorkerKilled):
        tick(cluster, clock)
    monkeypatch.undo()
    deployment = Deployment.objects.get()
    orphan = deployment.placements.get(status=PlacementStatus.RESERVED)
    assert len(cluster.list_objects("Deployment")) == 1  # the original's only: none for the orphan

    for _ in range(40):
        tick(cluster, clock)
        rollout.refresh_from_db()
        if rollout.status != RolloutStatus.RUNNING:
            break

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert rollout.nodes.get().state == NodeState.SUCCEEDED
    orphan.refresh_from_db()
    assert orphan.status == PlacementStatus.RELEASED
    # The original (released by the drain), the orphan (released), and one fresh copy that runs.
    statuses = sorted(deployment.placements.values_list("replica_index", "status"))
    assert [status for _, status in statuses].count(PlacementStatus.RELEASED) == 2
    assert len(statuses) == 3
    assert AuditEvent.objects.filter(verb="rolloutnode.replica_prewarmed").count() == 1
    assert list(ready_replicas(cluster).values()) == [1]
    check_invariants()


def test_a_replica_placed_back_by_a_tick_that_died_before_creating_its_workload_is_given_back_and_placed_afresh(
        monkeypatch):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    home = Node.objects.get(placements__isnull=False).name
    rollout = started(cluster, names=[home], move_back=True)
    for _ in range(60):
        tick(cluster, clock)
        step = rollout.nodes.get()
        if step.state == NodeState.MOVING_BACK:
            break
    assert step.state == NodeState.MOVING_BACK and not step.progress.get("homes")

    def die(*args, **kwargs):
        raise WorkerKilled("worker killed after the reservation committed")

    monkeypatch.setattr(placing, "_start", die)
    with pytest.raises(WorkerKilled):
        tick(cluster, clock)
    monkeypatch.undo()
    deployment = Deployment.objects.get()
    orphan = deployment.placements.get(status=PlacementStatus.RESERVED)

    for _ in range(40):
        tick(cluster, clock)
        rollout.refresh_from_db()
        if rollout.status != RolloutStatus.RUNNING:
            break

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    step = rollout.nodes.get()
    assert "1 workload replica(s) moved back" in step.reason, step.reason  # not kept elsewhere
    orphan.refresh_from_db()
    assert orphan.status == PlacementStatus.RELEASED
    running = deployment.placements.exclude(status=PlacementStatus.RELEASED).select_related("node").get()
    assert running.node.name == home and running.replica_index > orphan.replica_index
    assert list(ready_replicas(cluster).values()) == [1]
    check_invariants()


def test_a_restore_a_tick_died_in_is_finished_at_once_not_after_the_step_timeout(monkeypatch, settings):
    """The MIG manager fails on the node; the reconciler puts the node's labels back and dies
    before failing the step (still verifying, cordoned). The next tick finds the node's labels no
    longer the rollout's: it fails the node at once (restoring it again: uncordoned), instead of
    waiting for a proof that cannot come until ROLLOUT_STEP_TIMEOUT_S."""
    settings.ROLLOUT_STEP_TIMEOUT_S = 600
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1, start=EXCLUSIVE, sharing="auto", share_percent=None)
    mig_ready(cluster)
    # As the GPU operator labels a MIG-capable node: MIG off, applied (a restore puts this back,
    # and the MIG manager then applies it again: "pending", then "success", never "failed").
    cluster.set_node_labels("gpu-1", {LABEL_MIG_CONFIG: mig_config_name(EXCLUSIVE)})
    clock.advance(10)
    sync_inventory(cluster)
    assert node_named(cluster, "gpu-1").labels[LABEL_MIG_CONFIG_STATE] == "success"
    cluster.inject_mig_failure(render_mig_parted_entries(MIG_2X3G)[0], "cannot reset GPU 0: in use")
    rollout = started(cluster, names=["gpu-1"], config=MIG_2X3G)
    step = rollout.nodes.get()
    for _ in range(30):
        tick(cluster, clock)
        step.refresh_from_db()
        if step.state == NodeState.VERIFYING and node_named(cluster, "gpu-1").labels.get(LABEL_MIG_CONFIG_STATE) == "failed":
            break
    assert step.state == NodeState.VERIFYING

    def die(*args, **kwargs):
        raise WorkerKilled("worker killed after the labels were put back")

    monkeypatch.setattr(restoring, "_settle_copies", die)
    with pytest.raises(WorkerKilled):
        tick(cluster, clock)  # the failure seen: restore begins, the labels go back, then the worker dies
    monkeypatch.undo()
    step.refresh_from_db()
    assert step.state == NodeState.VERIFYING and node_named(cluster, "gpu-1").unschedulable

    for _ in range(5):
        tick(cluster, clock)
    step.refresh_from_db()
    rollout.refresh_from_db()
    assert step.state == NodeState.FAILED, (step.state, step.reason)
    assert not node_named(cluster, "gpu-1").unschedulable
    assert node_named(cluster, "gpu-1").labels[LABEL_MIG_CONFIG] == mig_config_name(EXCLUSIVE)
    assert rollout.status != RolloutStatus.RUNNING
    assert min(ready_replicas(cluster).values()) == 1
    check_invariants()
