"""cluster_savings() (counted by the database) equals compute_savings over cluster_occupants()
(one Holding per occupied partition, the reference), also where one occupant holds several
partitions on one GPU, which the SQL counts read row by row."""
from __future__ import annotations

import pytest

from nodes.models import GPU
from nodes.vocabulary import PartitionKind
from savings.services.current import cluster_occupants, cluster_savings, gpu_costs
from scheduler.core.savings import compute_savings
from tests.nodes.factories import make_node, make_partition
from tests.savings.cluster import A100, H100, _placement, build_cluster

pytestmark = pytest.mark.django_db


def _mig(gpu: GPU, slot: int, profile: str, start: int, size: int, **holder: object) -> None:
    make_partition(gpu, PartitionKind.MIG, slot=slot, share_milli=int(profile[0]) * 1000 // 7,
                   memory_mib=10240 * size, mig_profile=profile, mig_start=start, mig_size=size, **holder)


def _build_pairs_of_several() -> None:
    """Occupants holding several partitions of one GPU, next to seed 003's cluster."""
    mig = make_node("mig-d", A100, 3, "mig", partitions=False)
    gpu0, gpu1, gpu2 = GPU.objects.filter(node=mig).order_by("index")
    # One pod, two 3g instances on one GPU: 6/7, one baseline GPU (not two).
    _mig(gpu0, 0, "3g.40gb", 0, 4, pod="batch/two-migs")
    _mig(gpu0, 1, "3g.40gb", 4, 4, pod="batch/two-migs")
    # One placement, 4g + 3g on one GPU (7/7: still one), and the same placement on another GPU.
    wide = _placement(mig, "wide-mig")
    _mig(gpu1, 0, "4g.40gb", 0, 4, placement=wide)
    _mig(gpu1, 1, "3g.40gb", 4, 4, placement=wide, pod="ml/wide-pod")  # held: the holder's, not the pod's
    _mig(gpu2, 0, "1g.10gb", 0, 1, placement=wide)
    _mig(gpu2, 1, "1g.10gb", 1, 1, pod="ml/wide-pod")  # the pod itself: another occupant on gpu2
    ts = make_node("ts-e", H100, 2, "timeslice", partitions=False, sharing_replicas=2)
    t0, t1 = GPU.objects.filter(node=ts).order_by("index")
    # A pod on two replicas of a GPU whose shares add up past one GPU: ceil(1.5) = 2 baseline GPUs.
    make_partition(t0, PartitionKind.TIMESLICE, slot=0, share_milli=1000, pod="ml/greedy")
    make_partition(t0, PartitionKind.TIMESLICE, slot=1, share_milli=500, pod="ml/greedy")
    make_partition(t1, PartitionKind.TIMESLICE, slot=0, share_milli=500)  # free
    # GPUs without partition rows: compute handed out, or only memory.
    plain = make_node("plain-f", H100, 3, "exclusive", partitions=False)
    GPU.objects.filter(node=plain, index=0).update(allocated_milli=500)
    GPU.objects.filter(node=plain, index=1).update(allocated_memory_mib=1024)


def test_the_sql_counts_equal_the_occupants_counts():
    build_cluster()
    _build_pairs_of_several()
    costs = gpu_costs()
    counted, reference = cluster_savings(costs), compute_savings(cluster_occupants(), costs)
    assert counted == reference
    # Worked out by hand on top of seed 003's 9 baseline / 5 used (H100 7 / 4, A100 2 / 1):
    # A100 + 1 (two-migs) + 2 (wide on gpu1 and gpu2) + 1 (the pod on gpu2), used + 3;
    # H100 + 2 (greedy) + 2 (plain 0 and 1), used + 1 + 2.
    assert {m.gpu_model: (m.baseline_gpus, m.gpus_used) for m in counted.by_model} == {H100: (11, 7), A100: (6, 4)}


def test_an_empty_cluster_counts_nothing():
    assert cluster_savings(gpu_costs()) == compute_savings(cluster_occupants(), gpu_costs())
    assert cluster_savings(gpu_costs()).baseline_gpus == 0
