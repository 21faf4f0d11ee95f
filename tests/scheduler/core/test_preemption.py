"""The preemption planner (scheduler.core.preemption): a brute-force minimum on random clusters of at
most 8 candidates (Hypothesis), Kueue's order, never an equal or higher priority, never a blocked
victim (a PodDisruptionBudget with no disruption left), MIG never to a non-MIG pool."""
from __future__ import annotations

from itertools import chain, combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.core.preemption import Candidate, fallback_pools, kueue_order, plan_cost, plan_preemption
from tests.examples import examples

PRIORITIES = (100, 500, 1000)


@st.composite
def scenarios(draw):
    """Nodes with free (GPUs, GB) and candidates each holding (GPUs, GB) on one node; a request."""
    nodes = {f"n{i}": (draw(st.integers(0, 2)), draw(st.integers(0, 40))) for i in range(draw(st.integers(1, 3)))}
    candidates, sizes = [], {}
    for number in range(draw(st.integers(0, 8))):
        key = f"p{number}"
        candidates.append(Candidate(key, draw(st.sampled_from(sorted(nodes))), draw(st.sampled_from(PRIORITIES)),
                                    admitted=draw(st.integers(0, 5)),
                                    blocked=draw(st.sampled_from(["", "", "", "pdb ml/chat allows 0 disruptions"]))))
        sizes[key] = (draw(st.integers(1, 3)), draw(st.integers(1, 40)))
    need = (draw(st.integers(1, 4)), draw(st.integers(1, 80)))
    return nodes, candidates, sizes, need, draw(st.sampled_from(PRIORITIES))


def fits_of(nodes, sizes, candidates, need):
    on = {c.key: c.node for c in candidates}

    def fits(node: str, removed: frozenset[str]) -> bool:
        gpus, gb = nodes[node]
        gpus += sum(sizes[k][0] for k in removed if on[k] == node)
        gb += sum(sizes[k][1] for k in removed if on[k] == node)
        return gpus >= need[0] and gb >= need[1]
    return fits


def brute_force(nodes, candidates, fits, priority):
    best = None
    for node in nodes:
        allowed = [c for c in candidates if c.node == node and c.priority < priority and not c.blocked]
        for subset in chain.from_iterable(combinations(allowed, n) for n in range(len(allowed) + 1)):
            if fits(node, frozenset(c.key for c in subset)):
                cost = plan_cost(node, subset)
                best = cost if best is None or cost < best else best
    return best


@settings(max_examples=examples(1000), deadline=None)
@given(scenarios())
def test_the_victims_are_a_brute_force_minimum_and_never_equal_higher_or_blocked(scenario):
    nodes, candidates, sizes, need, priority = scenario
    fits = fits_of(nodes, sizes, candidates, need)
    plan = plan_preemption(priority, candidates, fits, nodes=nodes)
    expected = brute_force(nodes, candidates, fits, priority)
    if expected is None:
        assert plan is None
        return
    assert plan is not None and plan.cost == expected
    assert fits(plan.node, frozenset(v.key for v in plan.victims))
    # never a victim of equal or higher priority (so no cycle), never one a PDB protects
    assert all(v.priority < priority and not v.blocked for v in plan.victims)
    # minimal: no victim can be spared
    for victim in plan.victims:
        assert not fits(plan.node, frozenset(v.key for v in plan.victims if v is not victim))
    assert list(plan.victims) == kueue_order(plan.victims)


def test_kueue_order_is_lowest_priority_then_most_recently_admitted():
    a, b, c, d = (Candidate("a", "n", 500, 1), Candidate("b", "n", 100, 1), Candidate("c", "n", 100, 9),
                  Candidate("d", "n", 1000, 0))
    assert [x.key for x in kueue_order([a, b, c, d])] == ["c", "b", "a", "d"]


def test_greedy_then_reverse_keeps_only_what_is_needed():
    # 4 GPUs needed on a full node: the two low ones (1 GPU each) are taken first, then the medium
    # one (4 GPUs) makes it fit; putting back in reverse drops both low ones.
    candidates = [Candidate("low-1", "n", 100, 2), Candidate("low-2", "n", 100, 1), Candidate("mid", "n", 500, 0)]
    sizes = {"low-1": (1, 10), "low-2": (1, 10), "mid": (4, 40)}
    fits = fits_of({"n": (0, 0)}, sizes, candidates, (4, 40))
    plan = plan_preemption(1000, candidates, fits)
    assert plan is not None and [v.key for v in plan.victims] == ["mid"]


def test_equal_priority_is_never_preempted_and_a_request_that_fits_evicts_nothing():
    candidates = [Candidate("peer", "n", 500, 0)]
    fits = fits_of({"n": (0, 0)}, {"peer": (1, 10)}, candidates, (1, 10))
    assert plan_preemption(500, candidates, fits) is None
    roomy = fits_of({"n": (1, 10)}, {"peer": (1, 10)}, candidates, (1, 10))
    plan = plan_preemption(1000, candidates, roomy)
    assert plan is not None and plan.victims == ()


def test_mig_work_never_falls_back_to_a_non_mig_pool_and_time_slicing_only_to_time_slicing():
    assert fallback_pools(PartitionKind.MIG) == {SharingMode.MIG}
    assert fallback_pools(PartitionKind.TIMESLICE) == {SharingMode.TIMESLICE}
    assert SharingMode.MIG not in fallback_pools(PartitionKind.MPS)
