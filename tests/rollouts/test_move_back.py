"""Move-back (rollouts/move_back.py): once a node is proven and uncordoned, the workloads that
left it come back (placed there, ready, then the copy released), and none is ever unserved."""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from nodes.models import Node
from rollouts import move_back
from rollouts.choices import NodeState, RolloutStatus
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, Placement
from scheduler.services import moving
from tests.rollouts.simulated import mps_cluster, ready_replicas
from tests.rollouts.test_reconciler import run, started
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

ACTIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


def active_nodes(deployment: Deployment) -> list[str]:
    return sorted(p.node.name for p in deployment.placements.filter(status__in=ACTIVE).select_related("node"))


def every_workload_served(cluster):
    def check():
        served = ready_replicas(cluster)
        assert min(served.values()) >= 1, f"a workload had no ready replica: {served}"
    return check


def test_the_workloads_that_left_a_node_come_back_once_it_is_proven():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    busy = sorted({p.node.name for p in Placement.objects.select_related("node")})
    home = busy[0]
    before = {d.pk: active_nodes(d) for d in Deployment.objects.all()}
    leaving = [pk for pk, names in before.items() if home in names]
    assert leaving
    rollout = started(cluster, names=[home], move_back=True)
    states = []

    def check():
        every_workload_served(cluster)()
        states.append(rollout.nodes.get().state)

    rollout = run(cluster, clock, rollout, check=check)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    step = rollout.nodes.get()
    assert step.state == NodeState.SUCCEEDED
    assert NodeState.MOVING_BACK in states  # it went through the move-back, after verifying
    assert states.index(NodeState.MOVING_BACK) > states.index(NodeState.VERIFYING)
    for pk in leaving:
        assert active_nodes(Deployment.objects.get(pk=pk)) == [home], "not moved back, or its copy kept"
    assert f"{len(leaving)} workload replica(s) moved back" in step.reason
    moved = AuditEvent.objects.filter(verb=move_back.REPLICA_MOVED_BACK, object_id=str(step.pk))
    assert moved.count() == len(leaving)
    # Each copy was released only after its replica back home was ready: never a drop.
    for event in moved:
        new = Placement.objects.get(pk=event.after["new_placement"])
        copy = Placement.objects.get(pk=event.after["copy_placement"])
        assert new.node.name == home and copy.node.name != home
        assert copy.status == PlacementStatus.RELEASED
    assert not Node.objects.get(name=home).cordoned


def test_without_move_back_the_workloads_stay_where_they_were_moved():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=1)
    home = Placement.objects.get().node.name
    rollout = run(cluster, clock, started(cluster, names=[home]))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert home not in active_nodes(Deployment.objects.get())
    assert not AuditEvent.objects.filter(verb=move_back.REPLICA_PLACED_BACK).exists()


def test_a_workload_the_new_config_cannot_hold_stays_elsewhere_and_the_node_still_succeeds():
    # A 50 % MPS workload needs R <= 2: on the node at MPS R=4 there is no slot for it.
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=1, share_percent=50)
    home = Placement.objects.get().node.name
    rollout = started(cluster, names=[home], move_back=True)

    rollout = run(cluster, clock, rollout, check=every_workload_served(cluster))

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    step = rollout.nodes.get()
    assert "0 workload replica(s) moved back; 1 stayed elsewhere" in step.reason
    assert f"does not fit {home}" in step.reason
    nodes = active_nodes(Deployment.objects.get())
    assert len(nodes) == 1 and home not in nodes  # still served, once, elsewhere
    assert AuditEvent.objects.filter(verb=move_back.REPLICA_STAYS, object_id=str(step.pk)).count() == 1
    assert list(ready_replicas(cluster).values()) == [1]


class WorkerKilled(BaseException):
    """The worker dies here: no handler in the reconciler runs."""


def test_a_tick_killed_right_after_placing_back_adopts_that_replica(monkeypatch):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=1)
    home = Placement.objects.get().node.name
    rollout = started(cluster, names=[home], move_back=True)
    real = moving.place_replicas
    calls = []

    def place_then_die(*args, **kwargs):
        placed = real(*args, **kwargs)
        if kwargs.get("nodes") != [home]:  # the pre-warm copy (placed anywhere else): not the move back
            return placed
        calls.append(kwargs["nodes"])
        raise WorkerKilled("worker killed")

    monkeypatch.setattr(moving, "place_replicas", place_then_die)
    with pytest.raises(WorkerKilled):
        run(cluster, clock, rollout)
    assert calls == [[home]]  # placed through the placement services, on that node only
    monkeypatch.setattr(moving, "place_replicas", real)

    rollout = run(cluster, clock, rollout)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    deployment = Deployment.objects.get()
    assert active_nodes(deployment) == [home]
    # The original, its copy elsewhere, and one replica back home: never a second one placed back.
    assert deployment.placements.count() == 3
    assert list(ready_replicas(cluster).values()) == [1]


class NeverReadyOnHome(SimulatedCluster):
    """A replica placed on ``home`` never becomes ready (the node takes it but it never serves)."""

    home = ""

    def workload_ready(self, namespace: str, name: str) -> bool:
        placement = Placement.objects.filter(workload_name=name).select_related("node").order_by("-pk").first()
        if placement is not None and placement.node is not None and placement.node.name == NeverReadyOnHome.home:
            return False
        return super().workload_ready(namespace, name)


def test_a_replica_not_ready_back_home_in_time_is_released_and_the_copy_keeps_serving(settings):
    settings.ROLLOUT_STEP_TIMEOUT_S = 20
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=1, cluster_class=NeverReadyOnHome)
    home = Placement.objects.get().node.name
    NeverReadyOnHome.home = home
    rollout = started(cluster, names=[home], move_back=True)

    rollout = run(cluster, clock, rollout, check=every_workload_served(cluster))

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    step = rollout.nodes.get()
    assert "1 stayed elsewhere" in step.reason and "not ready in time" in step.reason
    nodes = active_nodes(Deployment.objects.get())
    assert len(nodes) == 1 and home not in nodes  # the copy serves; the replica back home was released
    placed_back = AuditEvent.objects.get(verb=move_back.REPLICA_PLACED_BACK)
    assert Placement.objects.get(pk=placed_back.after["new_placement"]).status == PlacementStatus.RELEASED
