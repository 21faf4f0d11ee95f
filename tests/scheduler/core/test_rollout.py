"""The rolling-update planner: batches, skips, moves before drain, the capacity dip, refusals.

Capacity arithmetic in the comments is in milli-GPUs (1000 = one GPU).
"""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.rollout import (
    SKIP_AT_TARGET,
    NoRoom,
    RolloutNode,
    RolloutWorkload,
    best_fit,
    plan_rollout,
)

OLD, NEW = ("mps", 2), ("mps", 4)


def node(name, workloads=(), capacity=8000, config=OLD, **kwargs):
    return RolloutNode(name, config, capacity, tuple(workloads), **kwargs)


def wl(key, size=1000, **kwargs):
    return RolloutWorkload(key, size, **kwargs)


def test_eight_nodes_with_max_unavailable_one_give_eight_batches_of_one():
    cluster = [node(f"n{i}", [wl(f"w{i}", 500)]) for i in range(8)]
    plan = plan_rollout(cluster, [n.name for n in cluster], NEW, 1)
    assert [b.nodes for b in plan.batches] == [(f"n{i}",) for i in range(8)]
    assert plan.feasible and plan.skipped == ()
    # Each batch takes one 8-GPU node out of 64 GPUs: 8000 / 64000 = 12.5 %.
    assert {(b.capacity_dip_milli, b.capacity_dip_percent) for b in plan.batches} == {(8000, 12.5)}


def test_empty_nodes_go_first_then_by_workload_count_then_name():
    cluster = [
        node("a", [wl("a1"), wl("a2")]),
        node("b", [wl("b1")]),
        node("c"),
        node("d", [wl("d1")]),
    ]
    plan = plan_rollout(cluster, ["a", "b", "c", "d"], NEW, 2)
    assert [b.nodes for b in plan.batches] == [("c", "b"), ("d", "a")]


def test_nodes_at_the_target_and_nodes_with_do_not_disrupt_pods_are_skipped_with_a_reason():
    cluster = [
        node("done", config=NEW),
        node("pinned", [wl("ns/keep", do_not_disrupt=True), wl("ns/other")]),
        node("todo", [wl("ns/x")]),
        node("spare"),
    ]
    plan = plan_rollout(cluster, ["done", "pinned", "todo"], NEW, 1)
    assert [(s.node, s.reason) for s in plan.skipped] == [
        ("done", SKIP_AT_TARGET),
        ("pinned", "holds do-not-disrupt workload ns/keep: gpuplane never evicts it, so the node cannot be drained"),
    ]
    assert [b.nodes for b in plan.batches] == [("todo",)]


def test_workloads_move_to_nodes_that_will_not_change_again_before_the_node_is_drained():
    # "spare" is not a target; "b" waits for its turn, so a's workload goes to spare, not to b.
    cluster = [node("a", [wl("w", 2000)]), node("b", capacity=8000), node("spare", capacity=4000)]
    plan = plan_rollout(cluster, ["a", "b"], NEW, 1)
    assert [(m.workload, m.source, m.destination) for m in plan.moves] == [("w", "a", "spare")]


def test_a_workload_parked_on_a_waiting_target_moves_again_at_its_turn():
    # Only "b" (a later target) has room while "a" changes; at b's turn both go to the changed a
    # (biggest first: 3000 then 500 into a's 4000).
    cluster = [node("a", [wl("w", 3000)], capacity=4000), node("b", capacity=4000, workloads=[wl("v", 500)])]
    plan = plan_rollout(cluster, ["a", "b"], NEW, 1)
    assert [(m.workload, m.source, m.destination) for m in plan.moves] == [
        ("w", "a", "b"), ("w", "b", "a"), ("v", "b", "a"),
    ]
    assert plan.feasible


def test_it_refuses_with_a_reason_per_workload_when_the_rest_cannot_hold_them():
    # a holds 3000 + 2000; spare has 4000 free: the 3000 fits (best fit), then 1000 is left for the 2000.
    cluster = [node("a", [wl("big", 3000), wl("mid", 2000)]), node("spare", capacity=4000)]
    plan = plan_rollout(cluster, ["a"], NEW, 1)
    assert not plan.feasible
    assert [(r.workload, r.node) for r in plan.refusals] == [("mid", "a")]
    assert plan.refusals[0].reason == "needs 2 GPU; the most any other schedulable node has free is 1 on spare"
    assert "mid on a cannot move: needs 2 GPU" in "\n".join(plan.explain())


def test_unschedulable_nodes_receive_nothing():
    cluster = [node("a", [wl("w")]), node("cordoned", schedulable=False)]
    plan = plan_rollout(cluster, ["a"], NEW, 1)
    assert plan.refusals[0].reason == "no other schedulable node"


def test_a_plugged_in_placer_decides_and_may_say_why_not():
    def engine(workload, free):
        raise NoRoom(f"{workload.key}: no node has a 3g.40gb free")

    plan = plan_rollout([node("a", [wl("w")]), node("b", config=NEW)], ["a"], NEW, 1, placer=engine)
    assert plan.refusals[0].reason == "w: no node has a 3g.40gb free"

    with pytest.raises(ValueError, match="not a candidate"):
        plan_rollout([node("a", [wl("w")]), node("b")], ["a"], NEW, 1, placer=lambda w, free: "a")


def test_capacity_after_the_change_counts_for_later_batches():
    # Under R=4 "a" offers twice the slots (4000 -> 8000), enough for both of b's workloads.
    cluster = [node("a", capacity=4000, capacity_after_milli=8000), node("b", [wl("x", 3000), wl("y", 3000)])]
    plan = plan_rollout(cluster, ["a", "b"], NEW, 1)
    assert plan.feasible
    assert {m.destination for m in plan.moves} == {"a"}


def test_best_fit_takes_the_tightest_node_that_holds_it():
    assert best_fit(wl("w", 1000), {"roomy": 5000, "tight": 1000, "small": 500}) == "tight"
    assert best_fit(wl("w", 6000), {"roomy": 5000}) is None


@pytest.mark.parametrize(
    ("targets", "max_unavailable", "message"),
    [(["a"], 0, "at least 1"), (["a", "a"], 1, "named twice"), (["zz"], 1, "unknown target node: zz")],
)
def test_bad_arguments_are_refused(targets, max_unavailable, message):
    with pytest.raises(ValueError, match=message):
        plan_rollout([node("a")], targets, NEW, max_unavailable)


# --- properties ----------------------------------------------------------------------------------

_configs = st.sampled_from([OLD, NEW, ("timeslice", 4)])


@st.composite
def clusters(draw):
    count = draw(st.integers(1, 12))
    nodes = []
    for i in range(count):
        workloads = draw(
            st.lists(st.tuples(st.integers(1, 4000), st.integers(0, 9).map(lambda roll: roll == 0)), max_size=4)
        )
        nodes.append(
            node(
                f"n{i:02d}",
                [wl(f"n{i:02d}/w{j}", size, do_not_disrupt=dnd) for j, (size, dnd) in enumerate(workloads)],
                capacity=draw(st.integers(0, 8)) * 1000,
                config=draw(_configs),
                schedulable=draw(st.booleans()) or draw(st.booleans()),
            )
        )
    targets = draw(st.lists(st.sampled_from([n.name for n in nodes]), unique=True))
    return nodes, targets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(1, 4))
def test_plan_properties(cluster_and_targets, max_unavailable):
    cluster, targets = cluster_and_targets
    plan = plan_rollout(cluster, targets, NEW, max_unavailable)
    by_name = {n.name: n for n in cluster}

    # No batch exceeds max_unavailable; every target appears exactly once (in a batch or skipped).
    assert all(1 <= len(b.nodes) <= max_unavailable for b in plan.batches)
    seen = [name for b in plan.batches for name in b.nodes] + [s.node for s in plan.skipped]
    assert sorted(seen) == sorted(targets)
    # Nodes already at the target are skipped with the reason, never batched.
    assert {s.node for s in plan.skipped if s.reason == SKIP_AT_TARGET} == {t for t in targets if by_name[t].config == NEW}
    # Every workload of a batched node either moves off it or is refused; moves never go into the batch.
    for batch in plan.batches:
        assert batch.capacity_dip_milli == sum(by_name[n].capacity_milli for n in batch.nodes)
        for step in batch.steps:
            assert all(m.destination not in batch.nodes and by_name[m.destination].schedulable for m in step.moves)
    # Stable: the same input gives the same plan.
    assert plan == plan_rollout(cluster, list(reversed(targets)), NEW, max_unavailable)
    # Feasible exactly when nothing is refused, and a refusal names a batched node.
    assert plan.feasible == (not plan.refusals)
    batched = {name for b in plan.batches for name in b.nodes}
    assert all(r.node in batched for r in plan.refusals)


@settings(max_examples=60, deadline=None)
@given(clusters(), st.integers(1, 4))
def test_moves_never_overfill_a_node(cluster_and_targets, max_unavailable):
    cluster, targets = cluster_and_targets
    plan = plan_rollout(cluster, targets, NEW, max_unavailable)
    # Replay the moves: no node ever holds more than its capacity because of a move.
    used = {n.name: n.used_milli for n in cluster}
    capacity = {n.name: n.capacity_milli for n in cluster}
    for move in plan.moves:
        used[move.source] -= move.size_milli
        used[move.destination] += move.size_milli
        assert used[move.destination] <= capacity[move.destination]
