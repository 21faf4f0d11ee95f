"""scheduler.adapters: inventory rows -> the core's ClusterSnapshot, and core assignments -> rows."""
from __future__ import annotations

import pytest

from nodes.models import GPU, Partition
from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.adapters import PLACEHOLDER_OCCUPANT, build_snapshot, partition_claims
from scheduler.core import Assignment, PartitionGrant
from tests.nodes.factories import make_node, make_partition
from tests.scheduler.inventory import demo_cluster

pytestmark = pytest.mark.django_db

A100_MIB = 40960


@pytest.fixture
def demo():
    return demo_cluster()


def node_state(inventory, name):
    return inventory.snapshot.nodes[inventory.snapshot.index[name]]


def test_it_reads_the_demo_in_three_queries(demo, django_assert_num_queries):
    with django_assert_num_queries(3):
        inventory = build_snapshot()

    snapshot = inventory.snapshot
    assert len(snapshot) == 12
    assert sorted(snapshot.names)[0] == "a100-node-1"
    node = node_state(inventory, "a100-node-2")
    assert (node.sharing_mode, node.sharing_replicas, node.gpu_model, len(node.gpus)) == (
        SharingMode.MPS, 4, "A100-SXM4-40GB", 8)
    assert node.labels["kubernetes.io/hostname"] == "a100-node-2"


def test_the_query_count_does_not_grow_with_the_cluster(django_assert_num_queries):
    for number in range(20):
        make_node(f"n{number}", gpu_count=4)

    with django_assert_num_queries(3):
        inventory = build_snapshot()

    assert len(inventory.snapshot) == 20


def test_it_lists_only_occupied_non_mig_partitions_with_their_holders(demo):
    inventory = build_snapshot()

    # a100-node-2 (MPS R=4): GPU 0 has three 25 % pods, GPU 1 one, the rest nothing.
    node = node_state(inventory, "a100-node-2")
    assert [len(gpu.partitions) for gpu in node.gpus] == [3, 1, 0, 0, 0, 0, 0, 0]
    assert node.gpus[0].allocated_milli == 750
    assert all(p.occupant.startswith("serving/bert-large-") for p in node.gpus[0].partitions)
    # ...and remembers the free slots, so that a reservation can claim one.
    assert len(inventory.index.free_rows[("a100-node-2", 0, "mps")]) == 1
    assert len(inventory.index.free_rows[("a100-node-2", 2, "mps")]) == 4


def test_weighted_shares_keep_their_sizes(demo):
    inventory = build_snapshot()

    gpu0 = node_state(inventory, "a100-node-4").gpus[0]
    assert sorted(p.share_milli for p in gpu0.partitions) == [250, 500]
    assert gpu0.allocated_memory_mib == (20 + 8) * 1024


def test_mig_gpus_list_every_instance_free_or_not(demo):
    inventory = build_snapshot()

    gpu0 = node_state(inventory, "a100-node-5").gpus[0]  # 2x 3g.20gb, one used by a pod
    assert gpu0.mig_enabled
    assert [(p.mig_profile, p.mig_start, bool(p.occupant)) for p in gpu0.partitions] == [
        ("3g.20gb", 0, True), ("3g.20gb", 4, False)]
    free = gpu0.partitions[1]
    assert inventory.index.mig_rows[("a100-node-5", 0, free.slot)].memory_mib == 19968  # NVML's 3g.20gb (19.50 GiB)


def test_time_slice_replicas_of_pods_share_what_the_counter_holds(demo):
    inventory = build_snapshot()

    # h100-node-4 GPU 0: two notebooks declaring 16 + 12 GiB (inventory sync summed them).
    gpu0 = node_state(inventory, "h100-node-4").gpus[0]
    counter = GPU.objects.get(node__name="h100-node-4", index=0).allocated_memory_mib
    assert counter == 28 * 1024
    assert sum(p.memory_mib for p in gpu0.partitions) == counter
    assert gpu0.allocated_milli == 500


def test_it_copies_telemetry_taints_and_schedulability():
    node = make_node("t1", gpu_count=1, cordoned=True, taints=[{"key": "gpu", "value": "a", "effect": "NoSchedule"}])
    GPU.objects.filter(node=node).update(utilization_pct=42.0, memory_used_mib=1000, power_w=300.0)

    state = node_state(build_snapshot(), "t1")

    assert state.cordoned and not state.schedulable
    assert state.taints[0].key == "gpu" and state.taints[0].effect == "NoSchedule"
    assert (state.gpus[0].utilization_pct, state.gpus[0].memory_used_mib, state.gpus[0].power_w) == (42.0, 1000, 300.0)


def test_a_gpu_without_a_free_row_is_not_offered():
    node = make_node("bare", gpu_count=2, partitions=False)
    make_partition(node.gpus.get(index=0))  # GPU 1 has no row at all

    state = node_state(build_snapshot(), "bare")

    assert state.gpus[0].partitions == []
    assert [p.occupant for p in state.gpus[1].partitions] == [PLACEHOLDER_OCCUPANT]
    assert state.gpus[1].allocated_milli == 0  # a placeholder holds capacity, not share


def test_missing_mps_slots_are_filled_with_placeholders():
    node = make_node("mps", gpu_count=1, sharing_mode="mps", sharing_replicas=4, partitions=False)
    gpu = node.gpus.get()
    for slot in range(2):  # 2 rows of the 4 slots R=4 asks for
        make_partition(gpu, kind=PartitionKind.MPS, slot=slot, share_milli=250, memory_mib=gpu.memory_mib // 4)

    state = node_state(build_snapshot(), "mps")

    assert [p.occupant for p in state.gpus[0].partitions] == [PLACEHOLDER_OCCUPANT] * 2


def test_a_limited_snapshot_reads_only_the_named_nodes():
    make_node("keep", gpu_count=1)
    make_node("skip", gpu_count=1)

    inventory = build_snapshot(["keep"])

    assert inventory.snapshot.names == ["keep"]
    assert set(inventory.index.gpu_pk) == {("keep", 0)}


def test_claims_name_the_rows_behind_an_assignment(demo):
    inventory = build_snapshot()
    whole = Assignment(node="a100-node-8", key="k", kind=PartitionKind.EXCLUSIVE,
                       partitions=(PartitionGrant(3, PartitionKind.EXCLUSIVE, 0, 1000, A100_MIB),
                                   PartitionGrant(1, PartitionKind.EXCLUSIVE, 0, 1000, A100_MIB)),
                       resources={"nvidia.com/gpu": 2}, env={})

    claims = partition_claims(whole, inventory.index)

    gpus = {g.index: g.pk for g in GPU.objects.filter(node__name="a100-node-8")}
    assert [c.gpu_pk for c in claims] == [gpus[1], gpus[3]]  # GPU row order: the lock order
    row = Partition.objects.get(gpu_id=gpus[1])
    assert [r.pk for r in claims[0].candidates] == [row.pk]
    assert not claims[0].create


def test_a_weighted_share_is_a_row_to_create(demo):
    inventory = build_snapshot()
    share = Assignment(node="a100-node-4", key="k", kind=PartitionKind.MPS_WEIGHTED,
                       partitions=(PartitionGrant(0, PartitionKind.MPS_WEIGHTED, 2, 250, 4096),),
                       resources={"nvidia.com/gpu": 1}, env={})

    (claim,) = partition_claims(share, inventory.index)

    assert claim.create and claim.slot == 2 and (claim.share_milli, claim.memory_mib) == (250, 4096)
    assert claim.gpu_pk == GPU.objects.get(node__name="a100-node-4", index=0).pk


def test_a_mig_grant_names_its_instance_row(demo):
    inventory = build_snapshot()
    gpu0 = node_state(inventory, "a100-node-5").gpus[0]
    free = next(p for p in gpu0.partitions if not p.occupant)
    grant = PartitionGrant(0, PartitionKind.MIG, free.slot, free.share_milli, free.memory_mib, "3g.20gb", 4, 4)

    (claim,) = partition_claims(Assignment("a100-node-5", "k", PartitionKind.MIG, (grant,), {}, {}), inventory.index)

    expected = Partition.objects.get(gpu__node__name="a100-node-5", gpu__index=0, mig_start=4)
    assert [r.pk for r in claim.candidates] == [expected.pk]
    assert claim.mig_profile == "3g.20gb"
