"""Namespace quotas in the consolidation planner: a move may change what a namespace is charged
(a shared replica takes the target node's slot), and its replacement is held alongside the
original until it is ready, so the plan keeps each namespace's use now plus every replacement
it places within the quota. Hypothesis over random clusters and quotas."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.consolidation import (
    WHOLE_GPU_MILLI,
    ConsolidationResult,
    PlanGPU,
    PlanNode,
    PlanQuota,
    PlanWorkload,
    plan_consolidation,
)
from tests.scheduler.core.test_consolidation import _cluster, check_plan, clusters


def _mps(name: str, replicas: int) -> PlanNode:
    return PlanNode(name, (PlanGPU(0, WHOLE_GPU_MILLI, replicas),), "mps", slot_milli=WHOLE_GPU_MILLI // replicas)


def check_quotas(nodes: list[PlanNode], workloads: list[PlanWorkload], quotas: dict[str, PlanQuota],
                 result: ConsolidationResult) -> None:
    """Every replacement the plan places, charged at its target's slot, on top of the use now."""
    by_key = {w.key: w for w in workloads}
    by_name = {n.name: n for n in nodes}
    milli: dict[str, int] = {}
    memory: dict[str, int] = {}
    for move in result.moves:
        w = by_key[move.workload]
        target = by_name[move.to_node]
        shared = w.share_milli < WHOLE_GPU_MILLI and not w.mig_profile and target.slot_milli is not None
        charge = (target.slot_milli if shared else w.share_milli) * len(w.gpus)  # type: ignore[operator]
        milli[w.namespace] = milli.get(w.namespace, 0) + charge
        memory[w.namespace] = memory.get(w.namespace, 0) + w.quota_memory_mib
    for namespace, quota in quotas.items():
        if quota.gpu_milli_limit is not None:
            assert quota.gpu_milli_used + milli.get(namespace, 0) <= quota.gpu_milli_limit, namespace
        if quota.memory_mib_limit is not None:
            assert quota.memory_mib_used + memory.get(namespace, 0) <= quota.memory_mib_limit, namespace


def test_a_move_onto_a_bigger_slot_needs_quota_room() -> None:
    # A quarter-GPU replica on an R=4 node (charged 250) could join one on an R=2 node (slot 500).
    nodes = [_mps("r4", 4), _mps("r2", 2)]
    workloads = [PlanWorkload("w1", "d1", "r4", (0,), 250, "mps", namespace="team", quota_memory_mib=8192),
                 PlanWorkload("w2", "d2", "r2", (0,), 250, "mps", namespace="team", quota_memory_mib=8192)]
    free = plan_consolidation(_cluster(nodes, workloads), workloads)
    assert [(m.workload, m.to_node) for m in free.moves] == [("w1", "r2")]
    # 750 used: a limit of 1000 leaves 250, not the 500 slot w1 would take on r2; w2 goes to
    # r4's 250 slot instead. With 900 neither fits, with 1250 the first plan stands.
    tight = plan_consolidation(_cluster(nodes, workloads), workloads, quotas={"team": PlanQuota(1000, 750)})
    assert [(m.workload, m.to_node) for m in tight.moves] == [("w2", "r4")]
    assert plan_consolidation(_cluster(nodes, workloads), workloads, quotas={"team": PlanQuota(900, 750)}).moves == ()
    roomy = plan_consolidation(_cluster(nodes, workloads), workloads, quotas={"team": PlanQuota(1250, 750)})
    assert [m.workload for m in roomy.moves] == ["w1"]
    # GPU memory: the replacement's 8 GiB on top of 16 GiB held.
    assert plan_consolidation(_cluster(nodes, workloads), workloads,
                              quotas={"team": PlanQuota(None, 750, 20000, 16384)}).moves == ()
    # Another namespace's quota does not hold this one back.
    assert plan_consolidation(_cluster(nodes, workloads), workloads, quotas={"other": PlanQuota(0, 0)}).moves


@st.composite
def quota_cases(draw: st.DrawFn):
    nodes, workloads, budgets = draw(clusters())
    namespaces = ["a", "b"]
    # Shared nodes get a slot (1000 / R) on some; each workload a namespace and a memory charge.
    nodes = [n if n.sharing_mode != "mps" or not draw(st.booleans())
             else PlanNode(n.name, n.gpus, n.sharing_mode, n.gpu_model, n.cpu_left_milli, n.memory_left_mib,
                           n.cordoned, slot_milli=draw(st.sampled_from([250, 500, 1000])))
             for n in nodes]
    workloads = [PlanWorkload(w.key, w.group, w.node, w.gpus, w.share_milli, w.sharing, w.mig_profile, w.cpu_milli,
                              w.memory_mib, w.gpu_models, w.priority, w.do_not_disrupt,
                              namespace=draw(st.sampled_from(namespaces)),
                              quota_memory_mib=draw(st.sampled_from([0, 4096, 16384])))
                 for w in workloads]
    quotas = {}
    for namespace in namespaces:
        held = sum(w.used_milli for w in workloads if w.namespace == namespace)
        memory = sum(w.quota_memory_mib for w in workloads if w.namespace == namespace)
        if draw(st.booleans()):
            quotas[namespace] = PlanQuota(held + draw(st.sampled_from([0, 250, 500, 1000, 4000])), held,
                                          draw(st.sampled_from([None, memory, memory + 16384])), memory)
    return nodes, workloads, budgets, quotas


@settings(max_examples=300, deadline=None)
@given(quota_cases(), st.sampled_from(["bestfit", "firstfit", "worstfit"]))
def test_plans_never_break_a_namespace_quota(case, policy: str) -> None:
    nodes, workloads, budgets, quotas = case
    result = plan_consolidation(_cluster(nodes, workloads), workloads, budgets=budgets, policy=policy, quotas=quotas)
    check_plan(nodes, workloads, result, budgets)
    check_quotas(nodes, workloads, quotas, result)
