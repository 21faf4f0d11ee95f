"""Partition assignment on the chosen node, and what reserving it does to the snapshot."""
from __future__ import annotations

import pytest

from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.core import CapacityError, ClusterSnapshot, SharingRequest
from scheduler.core.assignment import assign, format_memory_limit, format_thread_percentage
from scheduler.core.fit import build_need
from tests.scheduler.core.builders import DEMO_MIG_LAYOUT, GIB, H100, make_node, occupy, request


def _assign(snapshot: ClusterSnapshot, name: str, req):  # type: ignore[no-untyped-def]
    i = snapshot.index[name]
    return assign(snapshot.nodes[i], build_need(req), req.key, snapshot.models.mig_profiles[snapshot.model_id[i]])


@pytest.mark.parametrize(("memory_mib", "expected"), [(10240, "0=10G"), (20480, "0=20G"), (1536, "0=1536M")])
def test_pinned_memory_limit_format(memory_mib, expected):
    assert format_memory_limit(memory_mib) == expected


@pytest.mark.parametrize(("share_milli", "expected"), [(500, "50"), (250, "25"), (333, "33"), (5, "1")])
def test_thread_percentage_rounds_down_so_shares_never_sum_past_100(share_milli, expected):
    assert format_thread_percentage(share_milli) == expected


def test_uniform_mps_fills_the_gpu_with_the_fewest_free_slots_first():
    node = make_node("mps-4", mode=SharingMode.MPS, replicas=4)
    occupy(node, 1, 250, 10 * GIB, "team/old")  # GPU 1: 3 free slots, GPU 0: 4
    snapshot = ClusterSnapshot([node])
    result = _assign(snapshot, "mps-4", request(2))
    assert result is not None
    [grant] = result.partitions
    assert (grant.gpu_index, grant.slot, grant.kind) == (1, 1, PartitionKind.MPS)
    # A slot of R = 4: 1000 // 4 = 250 milli and 40960 // 4 = 10240 MiB pinned.
    assert (grant.share_milli, grant.memory_mib) == (250, 10240)
    assert result.env == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10G"}
    assert result.resources == {"nvidia.com/gpu": 1}


def test_weighted_mps_seed_example_takes_a_quarter_then_refuses_a_second_on_that_gpu():
    node = make_node("weighted", mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=1)
    occupy(node, 0, 500, 8 * GIB, "team/half")
    occupy(node, 0, 250, 4 * GIB, "team/quarter")
    snapshot = ClusterSnapshot([node])
    first = _assign(snapshot, "weighted", request(4, key="team/new#0", share_milli=250))
    assert first is not None
    [grant] = first.partitions
    # 500 + 250 held, 250 free: exactly enough. The share is the request's, the env says so.
    assert (grant.gpu_index, grant.slot, grant.share_milli, grant.memory_mib) == (0, 2, 250, 4 * GIB)
    assert first.env == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G"}
    snapshot.reserve(first)
    assert snapshot.gpu_free_share_milli[0, 0] == 0
    assert _assign(snapshot, "weighted", request(4, key="team/new#1", share_milli=250)) is None


def test_weighted_mps_picks_the_gpu_with_the_least_sufficient_free_share():
    node = make_node("weighted", mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=3)
    occupy(node, 0, 900, GIB, "team/a")  # 100 free: too little
    occupy(node, 1, 500, GIB, "team/b")  # 500 free: the best fit for 300
    snapshot = ClusterSnapshot([node])
    result = _assign(snapshot, "weighted", request(2, share_milli=300))
    assert result is not None and result.gpu_indexes == (1,)


def test_mig_gives_the_smallest_fitting_instance():
    snapshot = ClusterSnapshot([make_node("mig", mode=SharingMode.MIG, mig=DEMO_MIG_LAYOUT)])
    first = _assign(snapshot, "mig", request(8, key="team/a#0", share_milli=250))
    assert first is not None
    [grant] = first.partitions
    # 1g.10gb has 142 milli < 250; 2g.10gb (285 milli, 10 GiB) is the smallest that fits.
    assert (grant.gpu_index, grant.mig_profile, grant.mig_start, grant.mig_size) == (0, "2g.10gb", 4, 2)
    assert first.resources == {"nvidia.com/mig-2g.10gb": 1}
    assert first.env == {}
    snapshot.reserve(first)
    second = _assign(snapshot, "mig", request(8, key="team/b#0", share_milli=250))
    # GPU 0's 2g.10gb is taken: GPU 1's 2g.10gb is smaller than GPU 0's 3g.20gb.
    assert second is not None and (second.gpu_indexes, second.partitions[0].mig_profile) == ((1,), "2g.10gb")


def test_whole_gpus_are_the_lowest_free_indexes():
    node = make_node("h100", H100, gpus=4)
    occupy(node, 1, 1000, 81559, "team/busy", PartitionKind.EXCLUSIVE)
    snapshot = ClusterSnapshot([node])
    result = _assign(snapshot, "h100", request(100, gpu_count=2))
    assert result is not None
    assert result.gpu_indexes == (0, 2)
    assert result.kind == PartitionKind.EXCLUSIVE
    assert result.resources == {"nvidia.com/gpu": 2}
    assert result.share_milli == 2000


def test_timeslice_replicas_count_memory_and_pick_the_tightest_gpu():
    node = make_node("slice", mode=SharingMode.TIMESLICE, replicas=4, gpus=2)
    occupy(node, 0, 250, 20 * GIB, "team/a")  # 20 GiB free
    occupy(node, 1, 250, 35 * GIB, "team/b")  # 5 GiB free
    snapshot = ClusterSnapshot([node])
    small = _assign(snapshot, "slice", request(4, share_milli=250))
    assert small is not None and small.gpu_indexes == (1,)  # 5 GiB is the least that still fits 4
    big = _assign(snapshot, "slice", request(10, share_milli=250))
    assert big is not None and big.gpu_indexes == (0,)
    assert big.partitions[0].memory_mib == 10 * GIB  # the replica's own memory is what is counted
    assert big.env == {}


def test_a_mig_node_prefers_a_whole_gpu_only_when_it_is_the_smaller_unit():
    node = make_node("mixed", mode=SharingMode.MIG, mig=DEMO_MIG_LAYOUT, mig_gpus=1)  # GPU 1 is whole
    snapshot = ClusterSnapshot([node])
    small = _assign(snapshot, "mixed", request(8, share_milli=250))
    assert small is not None and small.kind == PartitionKind.MIG
    exclusive = _assign(snapshot, "mixed", request(30, sharing=SharingRequest.EXCLUSIVE))
    assert exclusive is not None and (exclusive.kind, exclusive.gpu_indexes) == (PartitionKind.EXCLUSIVE, (1,))


def test_reserve_refuses_over_allocation_and_changes_nothing():
    snapshot = ClusterSnapshot([make_node("mig", mode=SharingMode.MIG, mig=DEMO_MIG_LAYOUT)])
    result = _assign(snapshot, "mig", request(8, share_milli=250))
    snapshot.reserve(result)
    before = {name: column.copy() for name, column in snapshot.columns().items()}
    with pytest.raises(CapacityError, match="is not free"):
        snapshot.reserve(result)  # the same instance twice
    after = snapshot.columns()
    assert all((before[name] == after[name]).all() or name.endswith("pct") for name in before)


def test_reserve_refuses_a_share_beyond_what_is_free():
    node = make_node("weighted", mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=1)
    occupy(node, 0, 800, GIB, "team/a")
    snapshot = ClusterSnapshot([node])
    fresh = ClusterSnapshot([make_node("weighted", mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=1)])
    result = _assign(fresh, "weighted", request(1, share_milli=300))
    with pytest.raises(CapacityError, match="no room"):
        snapshot.reserve(result)
    assert len(snapshot.nodes[0].gpus[0].partitions) == 1


def test_release_frees_mig_instances_and_drops_shared_partitions():
    snapshot = ClusterSnapshot([
        make_node("mig", mode=SharingMode.MIG, mig=DEMO_MIG_LAYOUT),
        make_node("weighted", mode=SharingMode.MPS_WEIGHTED, replicas=4),
    ])
    mig = _assign(snapshot, "mig", request(8, key="team/a#0", share_milli=250))
    weighted = _assign(snapshot, "weighted", request(8, key="team/b#0", share_milli=250))
    snapshot.reserve(mig)
    snapshot.reserve(weighted)
    assert snapshot.release("mig", "team/a#0") == 1
    assert len(snapshot.nodes[0].gpus[0].partitions) == 3  # the instance stays, free
    assert all(p.is_free for p in snapshot.nodes[0].gpus[0].partitions)
    snapshot.unreserve(weighted)
    assert snapshot.nodes[1].gpus[0].partitions == []
    assert snapshot.gpu_free_share_milli[1, 0] == 1000
    assert snapshot.release("weighted", "team/nobody") == 0
