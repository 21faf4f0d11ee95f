"""A small cluster with every kind of occupant, and its savings worked out by hand.

- mps-a (H100-SXM5-80GB, MPS R=4): GPU 0 holds 4 slots of 4 gpuplane replicas; GPU 1 one slot
  used by a pod the inventory found; 3 slots free.
- big-b (H100-SXM5-80GB, exclusive): one tensor-parallel replica over both GPUs.
- mig-c (A100-SXM4-80GB, MIG): two 3g.40gb instances used by two pods; a second GPU empty.

Baseline (whole GPUs): H100 4 + 1 + 2 = 7, A100 2 -> 9. Used: H100 4 (mps-a 0 and 1, big-b 0
and 1), A100 1 -> 5. Saved: H100 3, A100 1 -> 4 = 44.4 % of 9. Default prices: 3 x 6.5 + 1 x 4.0
= 23.5 $/h; board power 3 x 700 W + 1 x 400 W = 2.5 kWh/h. GPU-equivalents: 5 x 1/4 + 2 + 2 x
3/7 = 4.107 -> 4.11.
"""
from __future__ import annotations

from nodes.models import GPU
from nodes.vocabulary import PartitionKind
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, Placement
from tests.nodes.factories import make_node, make_partition

H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-80GB"
EXPECTED = {
    "baseline_gpus": 9, "gpus_used": 5, "gpus_saved": 4, "saved_percent": 44.4,
    "usd_per_hour": 23.5, "kwh_per_hour": 2.5, "allocated_gpu_equivalents": 4.11,
}


def _placement(node, name: str, gpu_count: int = 1, replica: int = 0) -> Placement:
    deployment, _ = Deployment.objects.get_or_create(name=name, defaults={"model": name, "memory_mib": 1024, "gpu_count": gpu_count})
    return Placement.objects.create(deployment=deployment, node=node, replica_index=replica, status=PlacementStatus.RUNNING)


def build_cluster() -> None:
    mps = make_node("mps-a", H100, 2, "mps", partitions=False, sharing_replicas=4)
    for index in range(2):
        gpu = GPU.objects.get(node=mps, index=index)
        for slot in range(4):
            holder: dict[str, object]
            if index == 0:
                holder = {"placement": _placement(mps, "small-llm", replica=slot)}
            else:
                holder = {"pod": "ml/notebook-1"} if slot == 0 else {}
            make_partition(gpu, PartitionKind.MPS, slot=slot, share_milli=250, memory_mib=20389, **holder)
        GPU.objects.filter(pk=gpu.pk).update(allocated_milli=1000 if index == 0 else 250)
    big = make_node("big-b", H100, 2, "exclusive", partitions=False)
    tp2 = _placement(big, "big-llm", gpu_count=2)
    for gpu in GPU.objects.filter(node=big):
        make_partition(gpu, placement=tp2)
        GPU.objects.filter(pk=gpu.pk).update(allocated_milli=1000)
    mig = make_node("mig-c", A100, 2, "mig", partitions=False)
    gpu = GPU.objects.get(node=mig, index=0)
    for slot, start in enumerate((0, 4)):
        make_partition(gpu, PartitionKind.MIG, slot=slot, share_milli=428, memory_mib=40960, mig_profile="3g.40gb",
                       mig_start=start, mig_size=4, pod=f"batch/job-{slot}")
    GPU.objects.filter(pk=gpu.pk).update(allocated_milli=856)
