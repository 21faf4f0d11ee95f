"""gpuplane's packing rule through the API's scheduler: FragmentationGradient over the CPU-bounded
measure and SharingPlan, on small weighted-MPS clusters with the arithmetic written out.

The nodes are mps-weighted (any share on any GPU, as in the trace replay); the packing profile's
other score, PartitionCompat, is the same on every node here, so the packing rule decides and
ties go to the first node.
"""
from __future__ import annotations

from typing import Any

from nodes.vocabulary import SharingMode
from scheduler.core import ClusterSnapshot, PlacementRequest, SharingRequest, scheduler_for
from scheduler.core.profiles import PACKING
from tests.scheduler.core.builders import make_node, occupy

WHOLE_WITH_CPU = [{"share_milli": 1000, "gpu_count": 1, "weight": 1, "cpu_milli": 4000}]
TINY = [{"share_milli": 200, "gpu_count": 1, "weight": 1}]
PLAN_650_320 = [[650, 320], [470, 470]]


def _packing(typical: list[dict[str, Any]], patterns: list[list[int]] = (), *, cpu_bounded: bool = True,
             plan: bool = True) -> Any:
    scores = dict(PACKING["scores"]) if plan else {"FragmentationGradient": 0.35, "PartitionCompat": 0.1}
    args: dict[str, Any] = {"FragmentationGradient": {"typical_pods": typical, "cpu_bounded": cpu_bounded}}
    if plan:
        args["SharingPlan"] = {"patterns": list(patterns)}
    return scheduler_for("p", {"p": {**PACKING, "scores": scores, "plugin_args": args}})


def _weighted(name: str, gpus: int, cpu_milli: int = 64000, held: tuple[int, ...] = ()) -> Any:
    node = make_node(name, mode=SharingMode.MPS_WEIGHTED, replicas=16, gpus=gpus)
    node.cpu_allocatable_milli = cpu_milli
    for gpu, share in enumerate(held):
        if share:
            occupy(node, gpu, share, 1, f"team/{name}-{gpu}")
    return node


def _share(milli: int, cpu_milli: int = 1000) -> PlacementRequest:
    return PlacementRequest(key="t/p#0", memory_mib=1, sharing=SharingRequest.MPS_WEIGHTED, share_milli=milli,
                            cpu_milli=cpu_milli)


def _fragmentation(decision: Any) -> dict[str, tuple[int, int]]:
    return {row.node: next((s.raw, s.normalized) for s in row.scores if s.plugin == "FragmentationGradient")
            for row in decision.scored_rows}


def test_cpu_only_pods_keep_cpu_where_free_gpus_need_it():
    # Typical pod: 1 GPU + 4000 CPU. "balanced" (first) has CPU for exactly its 2 GPUs' pods,
    # "cpu-rich" for 4. A 4000-CPU CPU-only pod on "balanced" still leaves one typical pod room, so
    # FGD's measure scores both 50 and takes the first; the bounded measure counts the GPU the CPU
    # left can no longer feed: 2 GPUs x (4000 / 4000 = 1 pod) / 2 pods -> 1000 usable of 2000,
    # F 0 -> 1000, raw -1000 -> 100 / (1 + e^1) = 26.9 -> 26, and takes "cpu-rich" (still 50).
    def snapshot() -> ClusterSnapshot:
        return ClusterSnapshot([_weighted("balanced", 2, 8000), _weighted("cpu-rich", 2, 16000)])

    cpu_only = PlacementRequest(key="t/c#0", memory_mib=0, gpu_count=0, cpu_milli=4000)
    fgd = _packing(WHOLE_WITH_CPU, cpu_bounded=False).schedule(cpu_only, snapshot())
    assert fgd.node == "balanced" and _fragmentation(fgd) == {"balanced": (0, 50), "cpu-rich": (0, 50)}
    bounded = _packing(WHOLE_WITH_CPU).schedule(cpu_only, snapshot())
    assert bounded.node == "cpu-rich" and _fragmentation(bounded) == {"balanced": (-1000, 26), "cpu-rich": (0, 50)}
    assert bounded.assignment.partitions == () and bounded.assignment.cpu_milli == 4000


def test_a_cpu_light_gpu_pod_goes_where_cpu_is_short():
    # "cpu-poor" has 4 GPUs but CPU for 3 typical pods: 4000 x 3/4 = 3000 usable, F = 1000. A
    # whole GPU asking 2000 CPU leaves 3 GPUs and 10000 CPU (2.5 pods): 3000 x 2.5/3 = 2500, F 500,
    # raw +500 -> 62. On "balanced" F stays 0 (raw 0 -> 50). FGD's measure ties them at 50.
    def snapshot() -> ClusterSnapshot:
        return ClusterSnapshot([_weighted("balanced", 2, 8000), _weighted("cpu-poor", 4, 12000)])

    light = _share(1000, cpu_milli=2000)
    fgd = _packing(WHOLE_WITH_CPU, cpu_bounded=False).schedule(light, snapshot())
    assert fgd.node == "balanced"
    bounded = _packing(WHOLE_WITH_CPU).schedule(light, snapshot())
    assert bounded.node == "cpu-poor" and _fragmentation(bounded) == {"balanced": (0, 50), "cpu-poor": (500, 62)}


def test_a_sharing_pod_pairs_as_the_plan_does_where_the_gradient_leaves_a_gap():
    # Typical pod 200 milli. A 320 beside the 470 leaves 210, which still hosts one (raw 0: 50);
    # beside the 650 it leaves 30 (raw -30: 49). The gradient alone takes the 470's GPU and strands
    # 210 that only tiny pods fill; the plan pairs 650 with 320 (used 650 + 320 is a planned
    # content, 470 + 320 is not), so SharingPlan scores "with-650" 100 and "with-470" 0.
    def snapshot() -> ClusterSnapshot:
        return ClusterSnapshot([_weighted("with-470", 1, held=(470,)), _weighted("with-650", 1, held=(650,))])

    alone = _packing(TINY, plan=False).schedule(_share(320), snapshot())
    assert alone.node == "with-470" and _fragmentation(alone) == {"with-470": (0, 50), "with-650": (-30, 49)}
    planned = _packing(TINY, PLAN_650_320).schedule(_share(320), snapshot())
    assert planned.node == "with-650"
    plan = {row.node: next(s.raw for s in row.scores if s.plugin == "SharingPlan") for row in planned.scored_rows}
    assert plan == {"with-470": 0, "with-650": 1}


def test_a_share_the_plan_does_not_hold_is_left_to_the_gradient():
    def snapshot() -> ClusterSnapshot:
        return ClusterSnapshot([_weighted("with-470", 1, held=(470,)), _weighted("with-650", 1, held=(650,))])

    planned = _packing(TINY, PLAN_650_320).schedule(_share(160), snapshot())
    alone = _packing(TINY, plan=False).schedule(_share(160), snapshot())
    assert (planned.node, planned.assignment.gpu_indexes) == (alone.node, alone.assignment.gpu_indexes)


def test_the_plan_picks_the_gpu_inside_a_node_and_the_assignment_takes_it():
    # GPU 0 holds 660 (340 free: the tightest, so best fit's choice; 660 + 320 is off plan), GPU 1
    # holds 650 (350 free: on plan), GPU 2 is empty (on plan too: a 320 may start a 650 + 320).
    def snapshot() -> ClusterSnapshot:
        return ClusterSnapshot([_weighted("n", 3, held=(660, 650, 0))])

    assert _packing(TINY, plan=False).schedule(_share(320), snapshot()).assignment.gpu_indexes == (0,)
    planned = _packing(TINY, PLAN_650_320).schedule(_share(320), snapshot())
    assert planned.assignment.gpu_indexes == (1,)  # of the on-plan GPUs, the least free share


def test_a_whole_gpu_gang_takes_the_lowest_untouched_gpus_of_a_weighted_node():
    node = _weighted("n", 4, held=(0, 250))
    decision = _packing(TINY).schedule(
        PlacementRequest(key="t/g#0", memory_mib=2, gpu_count=2, sharing=SharingRequest.MPS_WEIGHTED), ClusterSnapshot([node]))
    assert decision.assignment.gpu_indexes == (0, 2)
    assert [p.share_milli for p in decision.assignment.partitions] == [1000, 1000]
    assert decision.assignment.resources == {"nvidia.com/gpu": 2}
