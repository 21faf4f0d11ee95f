"""The placement core's fast paths give what their plain forms give (issue 20, must-show 2).

Each test holds a fast path against the straightforward computation it replaced, on the
benchmark's seeded fleet (every sharing mode, MIG nodes with whole GPUs beside MIG ones, nodes
without CPU figures) and requests of every sharing choice.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from bench.placement import build_cluster, make_request
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind
from scheduler.core import PlacementRequest, Priority, SharingRequest, scheduler_for
from scheduler.core.fit import _share_ok, build_need, evaluate_fit
from scheduler.core.node_columns import KIND_ID
from scheduler.core.plugins.power_efficiency import floor_ratio


@pytest.fixture(scope="module")
def fleet():
    return build_cluster(120, seed=7)


def _gathered_share_ok(snapshot, need) -> np.ndarray:
    """The plain form: each offer's demand gathered by its kind (-1 = empty slot demands more
    than any unit has, as does a kind the request does not accept)."""
    demand = np.full(len(KIND_ID) + 1, SHARE_MILLI_FULL + 1, dtype=np.int64)
    for kind in need.kinds:
        demand[KIND_ID[kind] + 1] = need.min_share(kind)
    return snapshot.offer_share_milli >= demand[snapshot.offer_kind + 1]


@pytest.mark.parametrize("sharing", list(SharingRequest))
@pytest.mark.parametrize(("memory_mib", "share_milli", "priority", "slo"), [
    (2048, None, Priority.MEDIUM, None),  # small: a share, memory-sized MIG and time-slicing
    (12000, None, Priority.LOW, None),
    (40000, None, Priority.MEDIUM, None),  # large: an exclusive class
    (4096, 250, Priority.MEDIUM, None),  # a stated share, demanded of every kind
    (4096, None, Priority.HIGH, 50),  # a latency override
])
def test_kind_bits_give_the_per_offer_demand(fleet, sharing, memory_mib, share_milli, priority, slo):
    request = PlacementRequest(key="t/x#0", memory_mib=memory_mib, sharing=sharing, share_milli=share_milli,
                               priority=priority, latency_slo_ms=slo)
    need = build_need(request)
    assert np.array_equal(_share_ok(fleet, need), _gathered_share_ok(fleet, need))


@pytest.mark.parametrize("gpu_count", [0, 1, 2, 4])
@pytest.mark.parametrize("sharing", list(SharingRequest))
def test_a_node_that_does_not_fit_has_no_unit_kind(fleet, sharing, gpu_count):
    """``chosen_gpus`` reads the fit table's kind alone: -1 wherever the node does not fit."""
    if gpu_count > 1 and sharing not in (SharingRequest.AUTO, SharingRequest.EXCLUSIVE, SharingRequest.MPS_WEIGHTED):
        return
    need = build_need(PlacementRequest(key="t/x#0", memory_mib=30000 * max(gpu_count, 1), gpu_count=gpu_count,
                                       sharing=sharing))
    fit = evaluate_fit(fleet, need, np.arange(len(fleet)))
    assert (fit.kind[~fit.fits] == -1).all()
    assert (~fit.fits).any() or gpu_count == 0  # a CPU-only pod fits every node's GPUs


def test_an_empty_offer_slot_fails_every_demand(fleet):
    empty = fleet.offer_kind < 0
    assert empty.any()
    assert (fleet.offer_share_milli[empty] < 0).all() and (fleet.offer_kind_bit[empty] == 0).all()
    assert (fleet.offer_kind_bit[~empty] == 1 << fleet.offer_kind[~empty]).all()


def test_the_memory_sized_kinds_share_a_demand_of_zero(fleet):
    need = build_need(PlacementRequest(key="t/x#0", memory_mib=2048))
    assert need.min_share(PartitionKind.MIG) == 0 < need.min_share(PartitionKind.MPS)
    ok = _share_ok(fleet, need)
    mig = fleet.offer_kind == KIND_ID[PartitionKind.MIG]
    assert mig.any() and ok[mig].all()


def test_floor_ratio_is_integer_division():
    rng = np.random.default_rng(3)
    numerators = np.concatenate([rng.integers(0, 2**31, 20000), np.arange(0, 3000) * 7, [0, 2**31 - 1]])
    for denominator in (1, 3, 7, 100, 989, 1412, 2**31 - 1):
        assert np.array_equal(floor_ratio(numerators, denominator), numerators // denominator)
    denominators = rng.integers(1, 5000, len(numerators))
    assert np.array_equal(floor_ratio(numerators, denominators), numerators // denominators)


@pytest.mark.parametrize("profile", ["balanced", "packing"])
def test_the_stored_rows_are_the_matrix_rows(fleet, profile):
    """``to_dict`` builds the scored rows from the arrays; they equal the rows' own dicts."""
    scheduler = scheduler_for(profile)
    rng = random.Random(11)
    placed = 0
    for number in range(60):
        result = scheduler.schedule(make_request(rng, number), fleet, reserve=False)
        fast = json.dumps(result.to_dict()["rows"])
        plain = json.dumps([row.to_dict() for row in result.rows])
        assert fast == plain
        placed += result.assignment is not None
    assert placed > 30
