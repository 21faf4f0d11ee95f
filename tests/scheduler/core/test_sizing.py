"""Sizing per sharing mode (issue 8): each mode sizes by its own unit, and the decision names the rule.

MIG takes the smallest free instance whose memory fits (compute follows the profile),
time-slicing any replica with enough memory left, MPS the class's share only as a default; a
stated ``share_milli`` binds every mode. Memory in these tables is GiB (1 GB = 1024 MiB).
"""
from __future__ import annotations

import numpy as np
import pytest

from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.core import ClusterSnapshot, NodeState, PlacementRequest, scheduler_for
from scheduler.core.assignment import assign
from scheduler.core.decision import ScheduleResult
from scheduler.core.fit import build_need, chosen_gpus, evaluate_fit
from scheduler.core.node_columns import KINDS
from scheduler.core.types import Priority, SharingRequest, WorkloadType
from tests.scheduler.core.builders import A100, H100, make_node, occupy, request

# Instance memory as NVML reports it (nodes.catalog), MiB.
# A100-40GB: 1g.5gb 4864, 1g.10gb 9856, 2g.10gb 9856, 3g.20gb 19968, 4g.20gb 19968.
A100_LAYOUT = {"1g.5gb": 1, "2g.10gb": 1, "3g.20gb": 1}
# H100-80GB (81559 MiB board): 1g.10gb 9984, 1g.20gb 20096, 2g.20gb 20096, 3g.40gb 40448, 4g.40gb 40448.
H100_LAYOUT = {"1g.10gb": 1, "2g.20gb": 1, "4g.40gb": 1}


def _schedule(node: NodeState, req: PlacementRequest) -> ScheduleResult:
    return scheduler_for("balanced").schedule(req, ClusterSnapshot([node]))


def _mig(model: str, layout: dict[str, int]) -> NodeState:
    return make_node("mig", model, SharingMode.MIG, gpus=1, mig=layout)


@pytest.mark.parametrize(
    ("model", "layout", "memory_gib", "profile"),
    [
        # A100-40GB: the smallest instance whose memory fits, whatever the class's share.
        (A100, A100_LAYOUT, 2, "1g.5gb"),  # tiny: 2048 <= 4864
        (A100, A100_LAYOUT, 8, "2g.10gb"),  # medium: 8192 > 4864, <= 9856
        (A100, A100_LAYOUT, 16, "3g.20gb"),  # 16384 <= 19968 (the old 50 % rule refused 3g: 428 < 500)
        (A100, {"3g.20gb": 2}, 8, "3g.20gb"),  # only 3g instances free: 8 GB fits one
        (A100, {"1g.10gb": 1, "4g.20gb": 1}, 8, "1g.10gb"),  # 1 compute slice is enough for 8 GB
        # H100-80GB: the example, 8 GB took a 4g.40gb while 1g.10gb and 2g.20gb were free.
        (H100, H100_LAYOUT, 8, "1g.10gb"),  # 8192 <= 9984
        (H100, H100_LAYOUT, 12, "2g.20gb"),  # 12288 > 9984, <= 20096
        # 9.8 GB is 9.8 * 1024 = 10035 MiB: more than a real 1g.10gb holds (9984), though less
        # than the profile's share of the board (81559 // 8 = 10194) that the catalog once said.
        (H100, H100_LAYOUT, 9.8, "2g.20gb"),
        (H100, H100_LAYOUT, 30, "4g.40gb"),  # large, explicit mig: 30720 <= 40448
        (H100, {"1g.20gb": 1, "2g.20gb": 1, "3g.40gb": 1}, 12, "1g.20gb"),  # 1g.20gb before 2g.20gb
    ],
)
def test_mig_takes_the_smallest_free_instance_whose_memory_fits(model, layout, memory_gib, profile):
    result = _schedule(_mig(model, layout), request(memory_gib, sharing=SharingRequest.MIG))
    assert result.assignment is not None, result.message
    assert result.assignment.partitions[0].mig_profile == profile
    assert result.sizing_rule == f"MIG: smallest free instance with at least {memory_gib:g} GB -> {profile}"


def test_mig_skips_held_instances():
    node = _mig(H100, H100_LAYOUT)
    held = next(p for p in node.gpus[0].partitions if p.mig_profile == "1g.10gb")
    held.occupant = "team/other"
    result = _schedule(node, request(8, sharing=SharingRequest.MIG))
    assert result.assignment is not None
    assert result.assignment.partitions[0].mig_profile == "2g.20gb"


def test_mig_refuses_only_for_memory():
    # 24 GB fits no A100-40GB instance of this layout (largest 20480 MiB): refused for memory,
    # not for a compute share.
    result = _schedule(_mig(A100, A100_LAYOUT), request(24, sharing=SharingRequest.MIG))
    assert result.assignment is None
    assert "insufficient GPU memory" in result.diagnosis.rejected


@pytest.mark.parametrize(
    ("layout", "share_milli", "profile"),
    [
        # A stated share binds MIG too: the smallest instance with both the memory and the compute.
        (A100_LAYOUT, 250, "2g.10gb"),  # 2 GB, 25 %: 1g (142) < 250 <= 2g (285)
        (A100_LAYOUT, 400, "3g.20gb"),  # 2 GB, 40 %: 3g (428)
        (A100_LAYOUT, 100, "1g.5gb"),  # 2 GB, 10 %: 1g (142)
    ],
)
def test_mig_with_a_stated_share(layout, share_milli, profile):
    result = _schedule(_mig(A100, layout), request(2, sharing=SharingRequest.MIG, share_milli=share_milli))
    assert result.assignment is not None
    assert result.assignment.partitions[0].mig_profile == profile
    assert result.sizing_rule == (
        f"MIG: smallest free instance with at least 2 GB and {share_milli / 10:g} % as requested -> {profile}"
    )


@pytest.mark.parametrize(
    ("replicas", "held_gib", "memory_gib", "placed"),
    [
        # Time-slicing is sized by memory only: R=4 serves a medium (50 %) model.
        (4, [], 6, True),
        (4, [30], 6, True),  # 40 - 30 = 10 GB left on the GPU
        (4, [30, 6], 6, False),  # 4 GB left: not enough memory
        (8, [], 16, True),  # a 1000 // 8 = 125 milli replica still serves 16 GB
    ],
)
def test_time_slicing_takes_a_replica_with_enough_memory(replicas, held_gib, memory_gib, placed):
    node = make_node("slice", A100, SharingMode.TIMESLICE, replicas, gpus=1)
    for i, gib in enumerate(held_gib):
        occupy(node, 0, 1000 // replicas, gib * 1024, f"team/held-{i}")
    req = request(memory_gib, sharing=SharingRequest.TIMESLICE, workload_type=WorkloadType.DEVELOPMENT)
    result = _schedule(node, req)
    assert (result.assignment is not None) == placed, result.message
    if placed:
        assert result.sizing_rule == f"time-slicing: a replica with {memory_gib} GB free -> a replica of GPU 0 " \
                                     f"({memory_gib} GB counted)"
    else:
        assert "insufficient GPU memory" in result.diagnosis.rejected


def test_time_slicing_with_a_stated_share_needs_a_large_enough_replica():
    node = make_node("slice", A100, SharingMode.TIMESLICE, 4, gpus=1)
    result = _schedule(node, request(6, sharing=SharingRequest.TIMESLICE, share_milli=500))
    assert result.assignment is None  # a replica's nominal 1000 // 4 = 250 < 500
    assert "time-slice share too small" in result.diagnosis.rejected


@pytest.mark.parametrize(
    ("memory_gib", "share_milli", "replicas", "placed", "rule"),
    [
        # The class's share is MPS's default: tiny 25 %, medium 50 %.
        (2, None, 4, True, "MPS: 25 % by default for a tiny model, at least 2 GB -> 25 % of GPU 0, 10 GB"),
        (8, None, 2, True, "MPS: 50 % by default for a medium model, at least 8 GB -> 50 % of GPU 0, 20 GB"),
        (8, None, 4, False, "MPS: 50 % by default for a medium model, at least 8 GB"),  # 250 < 500
        # A stated share replaces the default.
        (8, 250, 4, True, "MPS: 25 % as requested, at least 8 GB -> 25 % of GPU 0, 10 GB"),
        (2, 500, 4, False, "MPS: 50 % as requested, at least 2 GB"),
    ],
)
def test_mps_sizes_by_share(memory_gib, share_milli, replicas, placed, rule):
    node = make_node("mps", A100, SharingMode.MPS, replicas, gpus=1)
    result = _schedule(node, request(memory_gib, sharing=SharingRequest.MPS, share_milli=share_milli))
    assert (result.assignment is not None) == placed, result.message
    assert result.sizing_rule == rule


@pytest.mark.parametrize(("share_milli", "expected"), [(None, 500), (300, 300), (50, 50)])
def test_weighted_mps_gets_the_default_or_the_stated_share(share_milli, expected):
    node = make_node("weighted", A100, SharingMode.MPS_WEIGHTED, 4, gpus=1)
    result = _schedule(node, request(8, sharing=SharingRequest.MPS_WEIGHTED, share_milli=share_milli))
    assert result.assignment is not None
    assert result.assignment.partitions[0].share_milli == expected
    basis = "by default for a medium model" if share_milli is None else "as requested"
    assert result.sizing_rule.startswith(f"MPS (weighted): {expected / 10:g} % {basis}, at least 8 GB -> ")


def test_auto_on_mig_sizes_by_memory_but_a_large_model_still_gets_a_whole_gpu():
    assert _schedule(_mig(H100, H100_LAYOUT), request(8)).assignment.partitions[0].mig_profile \
        == "1g.10gb"  # type: ignore[union-attr]
    node = _mig(H100, H100_LAYOUT)
    # Large under auto: the class asks for an exclusive GPU, which no instance of this layout is.
    large = _schedule(node, request(30))
    assert large.assignment is None
    # The latency override too, even with an explicit mig request.
    urgent = request(8, sharing=SharingRequest.MIG, priority=Priority.HIGH, latency_slo_ms=50)
    assert _schedule(node, urgent).assignment is None


def test_exclusive_and_multi_gpu_rules_are_named():
    one = _schedule(make_node("whole", H100, gpus=2), request(8, sharing=SharingRequest.EXCLUSIVE))
    assert one.sizing_rule == "exclusive: a whole GPU with at least 8 GB each -> GPU 0"
    two = _schedule(make_node("whole", H100, gpus=2), request(100, gpu_count=2))
    assert two.sizing_rule == "exclusive: 2 whole GPUs with at least 50 GB each -> GPU 0, 1"


def test_an_unplaced_request_names_the_rules_it_was_sized_by():
    result = _schedule(make_node("whole", H100, gpus=1), request(100, gpu_count=2))
    assert result.assignment is None
    assert result.sizing_rule == "exclusive: 2 whole GPUs with at least 50 GB each"
    slice_only = _schedule(make_node("mps", A100, SharingMode.MPS, 4, gpus=1),
                           request(6, sharing=SharingRequest.TIMESLICE, share_milli=300))
    assert slice_only.sizing_rule == "time-slicing: a replica with 6 GB free and a nominal share of 30 % as requested"


def test_the_decision_data_carries_the_rule_and_the_share_basis():
    result = _schedule(_mig(H100, H100_LAYOUT), request(8, sharing=SharingRequest.MIG))
    data = result.to_dict()
    assert data["sizing"] == "MIG: smallest free instance with at least 8 GB -> 1g.10gb"
    assert data["need"]["sizing"]["basis"] == "default"  # type: ignore[index]
    assert data["need"]["sizing"]["min_share_milli"]["mig"] == 0  # type: ignore[index]
    assert data["need"]["sizing"]["min_share_milli"]["mps"] == 500  # type: ignore[index]


def test_a_whole_gpu_comes_before_a_free_7g_instance_that_holds_less_memory():
    """A 7g.80gb holds 81,152 MiB, the board 81,559: the vectorized fit must still pick the whole
    GPU as the Python assignment does (a MIG instance only when it is less than a whole GPU)."""
    node = make_node("mig", H100, SharingMode.MIG, gpus=2, mig={"7g.80gb": 1}, mig_gpus=1)
    snapshot = ClusterSnapshot([node])
    req = request(8)
    need = build_need(req)

    fit = evaluate_fit(snapshot, need, np.arange(1))
    result = assign(node, need, req.key, snapshot.models.mig_profiles[snapshot.model_id[0]])

    assert result is not None and result.kind == PartitionKind.EXCLUSIVE and result.gpu_indexes == (1,)
    assert KINDS[fit.kind[0]] == PartitionKind.EXCLUSIVE
    assert node.gpus[chosen_gpus(snapshot, need, fit)[0]].index == 1
