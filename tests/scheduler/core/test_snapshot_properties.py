"""Property tests: the snapshot's incremental columns, and vectorized fit vs Python assignment."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode
from scheduler.core import ClusterSnapshot, NodeState, Outcome, SharingRequest, new_gpus, scheduler_for
from scheduler.core.assignment import assign
from scheduler.core.fit import build_need, chosen_gpus, evaluate_fit
from scheduler.core.fragmentation_columns import NodeFragmentation
from scheduler.core.framework import CycleState
from scheduler.core.node_columns import KINDS
from scheduler.core.plugins.capability_match import accepts_model
from scheduler.core.plugins.fragmentation_gradient import FragmentationGradient
from scheduler.core.types import PlacementRequest
from tests.scheduler.core.builders import GIB, occupy

MODELS = ("A100-SXM4-40GB", "H100-SXM5-80GB", "L4")
MIG_LAYOUTS = (
    {"3g.20gb": 1, "2g.10gb": 1, "1g.10gb": 1},
    {"1g.5gb": 7},
    {"4g.20gb": 1, "3g.20gb": 1},
    {"7g.40gb": 1},
)
H100_LAYOUTS = ({"3g.40gb": 1, "2g.20gb": 2}, {"1g.10gb": 7}, {"7g.80gb": 1})


@st.composite
def nodes(draw: st.DrawFn, name: str) -> NodeState:
    model = draw(st.sampled_from(MODELS))
    modes = [SharingMode.EXCLUSIVE, SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE]
    if model != "L4":
        modes.append(SharingMode.MIG)
    mode = draw(st.sampled_from(modes))
    count = draw(st.integers(1, 3))
    replicas = draw(st.integers(2, 5)) if mode in (SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE) else 1
    layout = None
    if mode == SharingMode.MIG:
        layout = draw(st.sampled_from(H100_LAYOUTS if model.startswith("H100") else MIG_LAYOUTS))
    gpus = new_gpus(model, count, mig_layout=layout, mig_gpus=draw(st.integers(0, count)) if layout else None)
    for gpu in gpus:
        if draw(st.booleans()):
            gpu.utilization_pct = draw(st.floats(0, 100))
            gpu.memory_used_mib = draw(st.integers(0, gpu.memory_mib))
    node = NodeState(name=name, gpu_model=model, sharing_mode=mode, sharing_replicas=replicas, gpus=gpus,
                     ready=draw(st.integers(0, 9)) != 0, cordoned=draw(st.integers(0, 9)) == 0,
                     cpu_allocatable_milli=draw(st.sampled_from((None, 8000, 32000))),
                     cpu_requested_milli=draw(st.sampled_from((0, 4000))),
                     memory_allocatable_mib=draw(st.sampled_from((None, 128 * 1024))))
    # Some pre-existing occupants of weighted / time-sliced GPUs, within the limits.
    if mode in (SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE):
        for gpu_position, gpu in enumerate(gpus):
            for n in range(draw(st.integers(0, replicas - 1))):
                share = draw(st.sampled_from((100, 250, 300))) if mode == SharingMode.MPS_WEIGHTED else SHARE_MILLI_FULL // replicas
                memory = draw(st.integers(1, 8)) * GIB
                if gpu.allocated_milli + share <= SHARE_MILLI_FULL and gpu.allocated_memory_mib + memory <= gpu.memory_mib:
                    occupy(node, gpu_position, share, memory, f"pre/{name}-{gpu_position}-{n}")
    return node


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeState]:
    count = draw(st.integers(1, 4))
    return [draw(nodes(f"node-{i}")) for i in range(count)]


@st.composite
def requests(draw: st.DrawFn, key: str) -> PlacementRequest:
    gpu_count = draw(st.sampled_from((0, 1, 1, 1, 2)))
    gang_sharing = (SharingRequest.AUTO, SharingRequest.EXCLUSIVE, SharingRequest.MPS_WEIGHTED)
    sharing = draw(st.sampled_from(list(SharingRequest) if gpu_count == 1 else gang_sharing))
    return PlacementRequest(
        key=key,
        memory_mib=draw(st.integers(256, 50 * GIB)),
        gpu_count=gpu_count,
        sharing=sharing,
        share_milli=draw(st.one_of(st.none(), st.sampled_from((100, 142, 250, 285, 333, 500, 1000)))),
        cpu_milli=draw(st.sampled_from((0, 500, 4000, 16000))),
        host_memory_mib=draw(st.sampled_from((0, 1024, 64 * 1024))),
    )


def assert_columns_match_a_rebuild(snapshot: ClusterSnapshot) -> None:
    rebuilt = ClusterSnapshot(copy.deepcopy(snapshot.nodes))
    ours, theirs = snapshot.columns(), rebuilt.columns()
    assert ours.keys() == theirs.keys()
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def assert_no_over_allocation(snapshot: ClusterSnapshot) -> None:
    for node in snapshot.nodes:
        # Host resources: what gpuplane placed never takes a node below zero (the pods it did not
        # place may already have: their requests are the inventory's, not ours).
        if node.cpu_allocatable_milli is not None and node.host_holds:
            assert node.cpu_free_milli >= min(node.cpu_allocatable_milli - node.cpu_requested_milli, 0)
        for gpu in node.gpus:
            held = gpu.occupied()
            assert gpu.allocated_milli <= SHARE_MILLI_FULL
            assert gpu.allocated_memory_mib <= gpu.memory_mib
            if node.sharing_mode in (SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE):
                assert len(held) <= node.sharing_replicas
            elif not gpu.mig_enabled:
                assert len(held) <= 1
            assert len({p.slot for p in gpu.partitions}) == len(gpu.partitions)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), data=st.data())
def test_incremental_columns_equal_a_rebuild_after_random_reserve_and_release(cluster, data):
    snapshot = ClusterSnapshot(cluster)
    scheduler = scheduler_for("balanced")
    live = []
    for step in range(data.draw(st.integers(1, 12))):
        if live and data.draw(st.booleans()):
            assignment = live.pop(data.draw(st.integers(0, len(live) - 1)))
            snapshot.unreserve(assignment)
        else:
            decision = scheduler.schedule(data.draw(requests(f"t/r-{step}#0")), snapshot)
            if decision.outcome == Outcome.PLACED:
                live.append(decision.assignment)
        assert_columns_match_a_rebuild(snapshot)
        assert_no_over_allocation(snapshot)
    for assignment in live:  # releasing everything we placed restores the starting columns
        snapshot.unreserve(assignment)
    assert_columns_match_a_rebuild(snapshot)
    assert_columns_match_a_rebuild(ClusterSnapshot(cluster))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), req=requests("t/probe#0"))
def test_vectorized_fit_agrees_with_the_python_assignment(cluster, req):
    snapshot = ClusterSnapshot(cluster)
    need = build_need(req)
    fit = evaluate_fit(snapshot, need, np.arange(len(snapshot)))
    gpus = chosen_gpus(snapshot, need, fit)
    for i, node in enumerate(snapshot.nodes):
        result = assign(node, need, req.key, snapshot.models.mig_profiles[snapshot.model_id[i]])
        assert bool(fit.fits[i]) == (result is not None), node
        if result is None:
            continue
        if need.cpu_only:  # no GPU unit: only the host requests, judged by NodeResourcesFit
            assert result.partitions == () and fit.kind[i] == -1
            continue
        assert KINDS[fit.kind[i]] == result.kind
        assert fit.unit_share_milli[i] == result.partitions[0].share_milli
        if not need.multi_gpu:
            assert node.gpus[gpus[i]].index == result.gpu_indexes[0]
        # What the assignment gives always covers the request.
        for grant in result.partitions:
            assert grant.share_milli >= need.min_share(grant.kind)
            assert grant.memory_mib >= need.memory_per_gpu_mib
            if grant.kind == PartitionKind.MPS_WEIGHTED and need.multi_gpu:  # a whole GPU, 100 % of it
                assert (grant.share_milli, grant.memory_mib) == (SHARE_MILLI_FULL, node.gpus[grant.gpu_index].memory_mib)
            elif grant.kind in (PartitionKind.MPS_WEIGHTED, PartitionKind.TIMESLICE):
                assert grant.memory_mib == need.memory_mib


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), req=requests("t/fgd#0"))
def test_fragmentation_gradient_equals_reserving_and_measuring_again(cluster, req):
    snapshot = ClusterSnapshot(cluster)
    need = build_need(req)
    # Classes with CPU (the bound in play) and a GPU-model list, as an observed workload has.
    plugin = FragmentationGradient(typical_pods=[
        {"share_milli": 250, "gpu_count": 1, "weight": 0.3, "cpu_milli": 2000},
        {"share_milli": 500, "gpu_count": 1, "weight": 0.3, "cpu_milli": 6000, "gpu_models": ["A100"]},
        {"share_milli": 1000, "gpu_count": 2, "weight": 0.2, "cpu_milli": 12000},
        {"share_milli": 0, "gpu_count": 0, "weight": 0.2, "cpu_milli": 4000},
    ])
    fit = evaluate_fit(snapshot, need, np.arange(len(snapshot)))
    host = (snapshot.cpu_free_milli >= req.cpu_milli) & (snapshot.host_memory_free_mib >= req.host_memory_mib)
    feasible = np.flatnonzero(fit.fits & host)  # what GPUMemoryFit and NodeResourcesFit pass
    if not len(feasible):
        return
    raw = plugin.score(CycleState(req, need, snapshot), feasible)

    def assigned(snap: ClusterSnapshot, i: int):  # type: ignore[no-untyped-def]
        return assign(snap.nodes[i], need, req.key, snap.models.mig_profiles[snap.model_id[i]],
                      cpu_milli=req.cpu_milli, host_memory_mib=req.host_memory_mib)

    def node_fragmentation(snap: ClusterSnapshot, i: int) -> float:
        fresh = ClusterSnapshot(copy.deepcopy(snap.nodes))  # measured from scratch, no cached rows
        return float(NodeFragmentation.current(plugin.table, fresh, accepts_model).frag[i])

    for position, i in enumerate(feasible):
        after = ClusterSnapshot(copy.deepcopy(snapshot.nodes))
        result = assigned(after, i)
        after.reserve(result)
        # The gradient from the kept per-node figures equals the measured difference.
        expected = node_fragmentation(snapshot, i) - node_fragmentation(after, i)
        if result.partitions and not need.multi_gpu:  # a unit beyond the request's share counts as stranded
            expected -= max(result.partitions[0].share_milli - need.share_milli, 0)
        assert abs(raw[position] - expected) <= 0.5 + 1e-6, (snapshot.nodes[i], result)
    # The kept figures follow a reservation: only the written row is recomputed, and it agrees
    # with a snapshot measured from scratch.
    i = int(feasible[0])
    snapshot.reserve(assigned(snapshot, i))
    kept = NodeFragmentation.current(plugin.table, snapshot, accepts_model).frag
    assert kept.tolist() == pytest.approx([node_fragmentation(snapshot, n) for n in range(len(snapshot))])
