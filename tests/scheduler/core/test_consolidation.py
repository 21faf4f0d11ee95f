"""The consolidation planner: examples, and Hypothesis over random clusters (no move breaks a
constraint, every freed node ends empty, nothing lands on a freed node)."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.consolidation import (
    WHOLE_GPU_MILLI,
    ConsolidationResult,
    PlanGPU,
    PlanNode,
    PlanWorkload,
    plan_consolidation,
)


def _node(name: str, gpus: int, mode: str = "mps-weighted", cpu: int = 64_000, **kw) -> PlanNode:
    return PlanNode(name, tuple(PlanGPU(i, WHOLE_GPU_MILLI) for i in range(gpus)), mode, cpu_left_milli=cpu, **kw)


def _cluster(nodes: list[PlanNode], workloads: list[PlanWorkload]) -> list[PlanNode]:
    """``nodes`` with what ``workloads`` use taken off (the planner is given what is left)."""
    out = []
    for node in nodes:
        on = [w for w in workloads if w.node == node.name]
        gpus = []
        for g in node.gpus:
            users = [w for w in on if g.index in w.gpus and not w.mig_profile]
            clients = None if g.clients_left is None else g.clients_left - sum(
                1 for w in users if w.share_milli < WHOLE_GPU_MILLI)
            mig = dict(g.free_mig)
            for w in on:
                if w.mig_profile and g.index in w.gpus:
                    mig[w.mig_profile] = mig.get(w.mig_profile, 0) - 1
            gpus.append(PlanGPU(g.index, g.free_milli - sum(w.share_milli for w in users), clients, mig))
        out.append(replace(node, gpus=tuple(gpus), cpu_left_milli=node.cpu_left_milli - sum(w.cpu_milli for w in on),
                           memory_left_mib=node.memory_left_mib - sum(w.memory_mib for w in on)))
    return out


def check_plan(nodes: list[PlanNode], workloads: list[PlanWorkload], result: ConsolidationResult,
               budgets: dict[str, int]) -> None:
    """Apply the moves to the cluster left after ``workloads`` and check every constraint."""
    left = {n.name: n for n in _cluster(nodes, workloads)}
    free = {(n, g.index): g.free_milli for n, node in left.items() for g in node.gpus}
    clients = {(n, g.index): g.clients_left for n, node in left.items() for g in node.gpus}
    mig = {(n, g.index): dict(g.free_mig) for n, node in left.items() for g in node.gpus}
    cpu = {n: node.cpu_left_milli for n, node in left.items()}
    by_key = {w.key: w for w in workloads}
    moved = [m.workload for m in result.moves]
    assert len(moved) == len(set(moved)), "a workload moves at most once"
    freed = set(result.nodes_freed)
    used: dict[str, int] = {}
    for move in result.moves:
        w = by_key[move.workload]
        target = left[move.to_node]
        assert move.from_node == w.node and move.to_node != w.node or move.to_gpus != w.gpus
        assert move.to_node not in freed, "nothing is placed on a freed node"
        assert any(o.node == move.to_node for o in workloads), "moving onto an idle node frees nothing"
        assert not target.cordoned and not left[w.node].cordoned
        assert not w.do_not_disrupt
        assert len(move.to_gpus) == len(w.gpus) == len(set(move.to_gpus))
        if w.gpus:
            assert target.sharing_mode == w.sharing
            assert not w.gpu_models or target.gpu_model in w.gpu_models
        cpu[move.to_node] -= w.cpu_milli
        assert cpu[move.to_node] >= 0, "CPU over-committed"
        for gpu in move.to_gpus:
            spot = (move.to_node, gpu)
            if w.mig_profile:
                mig[spot][w.mig_profile] = mig[spot].get(w.mig_profile, 0) - 1
                assert mig[spot][w.mig_profile] >= 0, "no free MIG partition"
                continue
            free[spot] -= w.share_milli
            assert free[spot] >= 0, "GPU over-committed"
            if w.share_milli < WHOLE_GPU_MILLI and clients[spot] is not None:
                clients[spot] -= 1  # type: ignore[operator]
                assert clients[spot] >= 0, "MPS client limit exceeded"  # type: ignore[operator]
        used[w.group] = used.get(w.group, 0) + 1
    for group, count in used.items():
        assert group not in budgets or count <= budgets[group], "PDB budget exceeded"
    assert used == dict(result.pdb_budget_used)
    moved_set = set(moved)
    for name in freed:
        assert all(w.key in moved_set for w in workloads if w.node == name), f"{name} not left empty"
    for name, gpu in result.gpus_freed:
        assert all(w.key in moved_set for w in workloads if w.node == name and gpu in w.gpus)
        assert not any(m.to_node == name and gpu in m.to_gpus for m in result.moves), "a freed GPU got a workload"


def test_two_half_empty_nodes_become_one() -> None:
    nodes = [_node("a", 2), _node("b", 2), _node("c", 2)]
    workloads = [
        PlanWorkload("w1", "d1", "a", (0,), 500, "mps-weighted", cpu_milli=1000),
        PlanWorkload("w2", "d2", "b", (0,), 1000, "mps-weighted", cpu_milli=1000),
        PlanWorkload("w3", "d3", "c", (0, 1), 1000, "mps-weighted", cpu_milli=1000),
    ]
    result = plan_consolidation(_cluster(nodes, workloads), workloads)
    assert result.nodes_freed == ("a",)  # the least loaded first; b then has room for w1 only
    assert [(m.workload, m.to_node, m.to_gpus) for m in result.moves] == [("w1", "b", (1,))]
    assert ("a", 0) in result.gpus_freed and ("a", 1) in result.gpus_freed
    assert "bestfit" in result.method
    check_plan(nodes, workloads, result, {})


def test_do_not_disrupt_and_budget_keep_nodes() -> None:
    nodes = [_node("a", 1), _node("b", 1), _node("c", 2)]
    workloads = [
        PlanWorkload("w1", "d1", "a", (0,), 200, "mps-weighted", do_not_disrupt=True),
        PlanWorkload("w2", "d2", "b", (0,), 300, "mps-weighted"),
        PlanWorkload("w3", "d3", "c", (0,), 400, "mps-weighted"),
    ]
    result = plan_consolidation(_cluster(nodes, workloads), workloads, budgets={"d2": 0})
    # a holds a pod never evicted, b's group may lose no replica: only c (the most loaded) empties.
    assert result.nodes_freed == ("c",) and {m.workload for m in result.moves} == {"w3"}
    reasons = {s.node: s.reason for s in result.skipped}
    assert "do-not-disrupt" in reasons["a"] and "disruption budget" in reasons["b"]


def test_a_node_is_freed_only_when_all_fit() -> None:
    nodes = [_node("a", 1), _node("b", 1)]
    workloads = [PlanWorkload("w1", "d1", "a", (0,), 600, "mps-weighted"),
                 PlanWorkload("w2", "d2", "b", (0,), 600, "mps-weighted")]
    result = plan_consolidation(_cluster(nodes, workloads), workloads)
    assert result.moves == () and result.nodes_freed == ()


def test_mig_and_client_limits() -> None:
    mig = PlanNode("m", (PlanGPU(0, 0, None, {"1g.10gb": 1}),), "mig")
    mig2 = PlanNode("n", (PlanGPU(0, 0, None, {"1g.10gb": 2}),), "mig")
    mps = PlanNode("p", (PlanGPU(0, 1000, 2),), "mps")
    mps2 = PlanNode("q", (PlanGPU(0, 1000, 2),), "mps")
    workloads = [PlanWorkload("w1", "d1", "m", (0,), 143, "mig", mig_profile="1g.10gb"),
                 PlanWorkload("w2", "d2", "n", (0,), 143, "mig", mig_profile="1g.10gb"),
                 PlanWorkload("w3", "d3", "p", (0,), 250, "mps"),
                 PlanWorkload("w4", "d4", "q", (0,), 250, "mps"),
                 PlanWorkload("w5", "d5", "q", (0,), 250, "mps")]
    nodes = [mig, mig2, mps, mps2]
    result = plan_consolidation(_cluster(nodes, workloads), workloads)
    # m's slice fits n's free one; p's client cannot join q (its GPU has 2 clients already).
    assert result.nodes_freed == ("m",)
    check_plan(nodes, workloads, result, {})


MODES = ("mps-weighted", "mps", "exclusive")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[PlanNode], list[PlanWorkload], dict[str, int]]:
    count = draw(st.integers(1, 8))
    nodes = []
    for i in range(count):
        mode = draw(st.sampled_from(MODES))
        limit = draw(st.sampled_from([None, 2, 4])) if mode != "exclusive" else None
        gpus = tuple(PlanGPU(g, WHOLE_GPU_MILLI, limit) for g in range(draw(st.integers(0, 4))))
        nodes.append(PlanNode(f"n{i}", gpus, mode, draw(st.sampled_from(["A", "B"])),
                              draw(st.integers(2000, 16000)), 1 << 20, draw(st.booleans()) and draw(st.booleans())))
    workloads: list[PlanWorkload] = []
    groups = [f"d{i}" for i in range(4)]
    left = {n.name: {g.index: [g.free_milli, g.clients_left] for g in n.gpus} for n in nodes}
    cpu = {n.name: n.cpu_left_milli for n in nodes}
    for k in range(draw(st.integers(0, 16))):
        node = nodes[draw(st.integers(0, count - 1))]
        want_cpu = draw(st.sampled_from([0, 500, 2000]))
        if cpu[node.name] < want_cpu:
            continue
        share = WHOLE_GPU_MILLI if node.sharing_mode == "exclusive" else draw(st.sampled_from([100, 250, 500, 1000]))
        width = draw(st.integers(0, 2)) if share == WHOLE_GPU_MILLI else 1
        ok = [g for g, (free, clients) in left[node.name].items()
              if (free or 0) >= share and (share == WHOLE_GPU_MILLI or clients is None or clients > 0)]
        if len(ok) < width:
            continue
        chosen = tuple(ok[:width])
        for g in chosen:
            left[node.name][g][0] -= share  # type: ignore[operator]
            if share < WHOLE_GPU_MILLI and left[node.name][g][1] is not None:
                left[node.name][g][1] -= 1  # type: ignore[operator]
        cpu[node.name] -= want_cpu
        models = draw(st.sampled_from([(), ("A",), ("B",)]))
        workloads.append(PlanWorkload(f"w{k}", draw(st.sampled_from(groups)), node.name, chosen, share,
                                      node.sharing_mode if chosen else "exclusive", cpu_milli=want_cpu,
                                      gpu_models=models if node.gpu_model in models or not models else (),
                                      priority=draw(st.integers(0, 2)), do_not_disrupt=draw(st.integers(0, 9)) == 0))
    budgets = draw(st.dictionaries(st.sampled_from(groups), st.integers(0, 3)))
    return nodes, workloads, budgets


@settings(max_examples=300, deadline=None)
@given(clusters(), st.sampled_from(["bestfit", "firstfit", "worstfit"]))
def test_plans_never_violate_a_constraint(case, policy: str) -> None:
    nodes, workloads, budgets = case
    result = plan_consolidation(_cluster(nodes, workloads), workloads, budgets=budgets, policy=policy)
    check_plan(nodes, workloads, result, budgets)
