"""An executor tick killed between reserving a move's replacement and creating its workload.

The plan's move is carried out by the mover (``scheduler.services.moving``), which chooses and
persists the replacement's replica index on the ``Move`` before placing, so a tick that dies
after placing adopts the copy next time. But an index whose attempt is over is spent (a replica
index is never reused): the next tick must give back
a reservation the dead tick left (its pod never comes) and place the replacement under a fresh
index, as rollouts' pre-warming does, instead of waiting on it or failing the move.
"""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from consolidation import execution
from consolidation.analysis import analyse
from consolidation.approval import approve
from consolidation.models import ConsolidationPlan
from scheduler.choices import PlacementStatus
from scheduler.models import Move, Placement
from scheduler.services import placing
from scheduler.services.moving import advance_moves
from scheduler.services.placing import release_replica
from tests.consolidation.ticks import execute_tick
from tests.rollouts.simulated import mps_cluster, ready_replicas
from tests.scheduler.inventory import FakeClock, check_invariants

pytestmark = pytest.mark.django_db


class WorkerKilled(BaseException):
    """The worker process dies here (SIGKILL): no handler or ``finally`` of placing runs."""


def advance(cluster, clock) -> None:
    execute_tick(cluster, clock)
    clock.advance(1)


def killed_while_placing(monkeypatch):
    """A plan with one move, approved, whose first tick dies after reserving the replacement and
    before creating its workload; returns the clock, the cluster, the plan and the orphan."""
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    plan = analyse()
    assert plan is not None and len(plan.moves) == 1
    approve(plan, actor="test")

    def die(*args, **kwargs):
        raise WorkerKilled("worker killed after the reservation committed")

    monkeypatch.setattr(placing, "_start", die)
    with pytest.raises(WorkerKilled):
        advance(cluster, clock)  # approved -> executing, then the move's first step
    monkeypatch.undo()
    plan.refresh_from_db()
    move = Move.objects.get(pk=plan.progress["moves"]["0"]["move"])
    assert move.replacement_id is None, "the tick died before noting its replacement"
    orphan = Placement.objects.get(deployment_id=plan.moves[0]["deployment"], replica_index=move.replacement_index)
    assert orphan.status == PlacementStatus.RESERVED
    return clock, cluster, plan, orphan


def run_to_the_end(cluster, clock, plan: ConsolidationPlan) -> ConsolidationPlan:
    desired = dict.fromkeys(ready_replicas(cluster), 1)
    for _ in range(30):
        advance(cluster, clock)
        served = ready_replicas(cluster)
        assert all(served[pk] >= want for pk, want in desired.items()), f"a replica was dropped: {served}"
        plan.refresh_from_db()
        if plan.status != "executing":
            break
    return plan


def assert_moved_under_a_fresh_index(cluster, plan: ConsolidationPlan, orphan: Placement) -> None:
    assert plan.status == "executed", plan.reason
    assert "1 of 1 move(s) done" in plan.reason, plan.reason
    move, entry = plan.moves[0], plan.progress["moves"]["0"]
    assert entry["state"] == "done"
    new = Placement.objects.select_related("node", "deployment").get(pk=entry["new"])
    assert new.pk != orphan.pk and new.replica_index != orphan.replica_index
    assert new.status in (PlacementStatus.BINDING, PlacementStatus.RUNNING) and new.node.name == move["to_node"]
    assert cluster.workload_ready(new.deployment.namespace, new.workload_name)
    orphan.refresh_from_db()
    assert orphan.status == PlacementStatus.RELEASED
    assert Placement.objects.get(pk=move["placement"]).status == PlacementStatus.RELEASED
    check_invariants()


def test_a_replacement_reserved_by_a_tick_that_died_is_given_back_and_placed_afresh(monkeypatch):
    clock, cluster, plan, orphan = killed_while_placing(monkeypatch)

    plan = run_to_the_end(cluster, clock, plan)

    assert_moved_under_a_fresh_index(cluster, plan, orphan)


def test_a_move_whose_persisted_index_was_spent_meanwhile_takes_a_fresh_one(monkeypatch):
    clock, cluster, plan, orphan = killed_while_placing(monkeypatch)
    # Meanwhile the orphan was released by someone else (the index is spent, its row stays).
    release_replica(orphan.deployment, orphan.replica_index, cluster=cluster, reason="test: given up elsewhere")

    plan = run_to_the_end(cluster, clock, plan)

    assert_moved_under_a_fresh_index(cluster, plan, orphan)


def test_a_move_asked_for_by_a_tick_that_died_before_noting_it_is_the_plans_when_it_ends(monkeypatch):
    """The executor asks the mover for a move (committed), then dies before it writes the move's id
    into the plan's progress. If the mover carries the move out before the executor's next tick,
    asking again finds no move in flight and an original already gone: the plan must still read
    that move as its own (done), not report "nothing moved" for a replica that did move."""
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    plan = analyse()
    assert plan is not None and len(plan.moves) == 1
    approve(plan, actor="test")

    def die(plan):
        raise WorkerKilled("worker killed after the move was asked for")

    monkeypatch.setattr(execution, "_save", die)
    with pytest.raises(WorkerKilled):
        execution.advance_plans(now=datetime.fromtimestamp(clock.now, UTC))  # approved -> executing, the move asked for
    monkeypatch.undo()
    plan.refresh_from_db()
    assert plan.status == "executing" and plan.progress["moves"] == {}, "the tick died before noting its move"
    [move] = Move.objects.all()
    for _ in range(10):  # the mover alone (the executor's ticks were lost with its worker)
        advance_moves(cluster=cluster, now=datetime.fromtimestamp(clock.now, UTC))
        clock.advance(1)
    move.refresh_from_db()
    assert move.status == "done"

    plan = run_to_the_end(cluster, clock, plan)

    assert plan.status == "executed" and "1 of 1 move(s) done" in plan.reason, plan.reason
    assert plan.progress["moves"]["0"]["move"] == move.pk and plan.progress["moves"]["0"]["state"] == "done"
    assert Move.objects.count() == 1
    check_invariants()
