"""Packing filter, scorers and policies on small hand-computed clusters (docs/design.md section 13)."""
from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.fragmentation import PodClass
from scheduler.core.packing import (
    PackingCluster,
    PackNode,
    PackPod,
    best_fit_scores,
    fgd_scores,
    first_fit_scores,
    sigmoid_score,
    worst_fit_scores,
)
from scheduler.core.packing_plan import SharingPlan
from scheduler.core.packing_policies import POLICIES, Choice, choose, class_table

HALF_POD = PackPod(cpu_milli=1000, memory_mib=1024, gpu_milli=500, gpu_count=1)
HALF_CLASS = (PodClass(0, 500, 1),)
NO_SHARING = SharingPlan.build([])


def _cluster(*nodes: PackNode, classes=HALF_CLASS, policy: str = "fgd") -> PackingCluster:
    cluster = PackingCluster(nodes)
    cluster.track(class_table(policy, list(classes), list(cluster.models)))
    return cluster


def test_the_filter_checks_cpu_memory_model_and_gpu_room():
    cluster = _cluster(PackNode("cpu-poor", 500, 9000, 2, "T4"), PackNode("mem-poor", 8000, 100, 2, "T4"),
                       PackNode("v100", 8000, 9000, 2, "V100M16"), PackNode("ok", 8000, 9000, 2, "T4"))
    pod = PackPod(1000, 1024, 1000, 2, ("T4", "P100"))
    assert cluster.fits(pod).tolist() == [3]
    cluster.place(3, pod, cluster.whole_gpus(3, 2))
    assert cluster.fits(pod).tolist() == []
    assert cluster.fits(PackPod(1000, 1024, 0, 0)).tolist() == [2, 3]  # CPU-only still fits


def test_best_worst_and_first_fit_follow_the_reference_formulas():
    cluster = _cluster(PackNode("a", 64000, 10**6, 2, "T4"), PackNode("b", 96000, 10**6, 8, "G2"))
    pod = PackPod(32000, 0, 1000, 1)
    rows = np.array([0, 1])
    # a: 1 - (0.5 x 32000/128000 + 0.5 x 1000/8000) = 0.8125 -> 81; b: 1 - (0.25 + 0.4375) -> 31
    assert best_fit_scores(cluster, pod, rows).tolist() == [81, 31]
    assert worst_fit_scores(cluster, pod, rows).tolist() == [18, 68]
    assert first_fit_scores(cluster, pod, rows).tolist() == [0, 0]


def test_fgd_squashes_the_fragmentation_delta_to_whole_numbers():
    assert sigmoid_score(np.array([0.0, 1000.0, -1000.0, -100.0, 39.0])).tolist() == [50, 73, 26, 47, 50]


def test_fgd_avoids_the_placement_that_fragments_where_best_fit_takes_it():
    # Typical pod 500 milli. "roomy": one free GPU, 500 -> 500 left still hosts one: delta 0 -> 50.
    # "tight": 600 free -> 100 left hosts nothing: F 0 -> 100, delta -100 -> 47.
    cluster = _cluster(PackNode("roomy", 8000, 10**6, 1, "T4"), PackNode("tight", 8000, 10**6, 1, "T4"))
    cluster.place(1, PackPod(0, 0, 400, 1), [0])
    scores, gpus = fgd_scores(cluster, HALF_POD, np.array([0, 1]))
    assert scores.tolist() == [50, 47] and gpus.tolist() == [0, 0]
    assert choose("fgd", cluster, HALF_POD).row == 0
    assert choose("bestfit", cluster, HALF_POD).row == 1


def test_a_sharing_pod_takes_the_gpu_it_scores_best_on():
    cluster = _cluster(PackNode("n", 8000, 10**6, 3, "T4"))
    cluster.place(0, PackPod(0, 0, 400, 1), [0])  # GPU 0: 600 left (-> 100 fragments), GPUs 1, 2: 1000
    cluster.place(0, PackPod(0, 0, 500, 1), [2])  # GPU 2: 500 left (-> 0, nothing to fragment)
    # FGD: GPU 1 -> 500 left, delta 0 (50); GPU 2 -> 0 left, delta 0 (50); GPU 0 -> 47.
    # FGD keeps the first of equal scores (GPU 1); BestFit the tightest GPU (GPU 2).
    assert choose("fgd", cluster, HALF_POD).gpus == [1]
    assert choose("bestfit", cluster, HALF_POD).gpus == [2]


WHOLE_CLASS = (PodClass(4000, 1000, 1),)


def test_gpuplane_keeps_cpu_where_free_gpus_need_it_and_fgd_does_not():
    # Typical pod: 1 GPU + 4000 CPU. "balanced" (first in row order) has CPU for exactly its 2
    # GPUs' pods, "cpu-rich" for 4 pods. A 4000-CPU CPU-only pod on "balanced" still leaves one
    # typical pod room, so FGD scores both nodes 50 and takes the first; gpuplane counts the GPU
    # that CPU can no longer feed (1000 milli: score 26) and takes "cpu-rich" (still 50).
    nodes = (PackNode("balanced", 8000, 10**6, 2, "T4"), PackNode("cpu-rich", 16000, 10**6, 2, "T4"))
    cpu_only = PackPod(4000, 1024, 0, 0)
    assert choose("fgd", _cluster(*nodes, classes=WHOLE_CLASS), cpu_only) == Choice(0, [])
    gpuplane = _cluster(*nodes, classes=WHOLE_CLASS, policy="gpuplane")
    assert fgd_scores(gpuplane, cpu_only, np.array([0, 1]))[0].tolist() == [26, 50]
    assert choose("gpuplane", gpuplane, cpu_only, plan=NO_SHARING) == Choice(1, [])


def test_gpuplane_sends_a_cpu_light_gpu_pod_where_cpu_is_short():
    # Typical pod: 1 GPU + 4000 CPU. "balanced" (first) has CPU for its 2 GPUs' pods; "cpu-poor"
    # has 4 GPUs but CPU for 3 pods. A 1-GPU pod asking only 2000 CPU leaves one typical pod
    # room on either, so FGD ties (50, 50) and takes "balanced". gpuplane sees "cpu-poor" go
    # from 1000 stranded milli to 500 (delta +500: 62) and sends the CPU-light pod there.
    nodes = (PackNode("balanced", 8000, 10**6, 2, "T4"), PackNode("cpu-poor", 12000, 10**6, 4, "T4"))
    light = PackPod(2000, 1024, 1000, 1)
    fgd = _cluster(*nodes, classes=WHOLE_CLASS)
    assert fgd_scores(fgd, light, np.array([0, 1]))[0].tolist() == [50, 50]
    assert choose("fgd", fgd, light) == Choice(0, [0])
    gpuplane = _cluster(*nodes, classes=WHOLE_CLASS, policy="gpuplane")
    assert fgd_scores(gpuplane, light, np.array([0, 1]))[0].tolist() == [50, 62]
    assert choose("gpuplane", gpuplane, light, plan=NO_SHARING) == Choice(1, [0])


def test_gpuplane_needs_the_cpu_bounded_table_and_the_plan():
    with pytest.raises(ValueError, match="CPU-bounded"):
        choose("gpuplane", _cluster(PackNode("n", 8000, 4096, 1)), HALF_POD, plan=NO_SHARING)
    with pytest.raises(ValueError, match="plan"):
        choose("gpuplane", _cluster(PackNode("n", 8000, 4096, 1), policy="gpuplane"), HALF_POD)


TINY_CLASS = (PodClass(0, 200, 1),)
PLAN_650_320 = SharingPlan.build([650, 320, 470, 470])  # GPUs 650+320 and 470+470


def _pair_cluster(policy: str) -> PackingCluster:
    # "with-470" (first row): one GPU holding a 470 (530 free); "with-650": one holding a 650.
    cluster = _cluster(PackNode("with-470", 8000, 10**6, 1, "T4"), PackNode("with-650", 8000, 10**6, 1, "T4"),
                       classes=TINY_CLASS, policy=policy)
    cluster.place(0, PackPod(0, 0, 470, 1), [0])
    cluster.place(1, PackPod(0, 0, 650, 1), [0])
    return cluster


def test_gpuplane_pairs_a_sharing_pod_as_the_lists_plan_does_where_fgd_leaves_a_gap():
    # Typical pod 200 milli. A 320 beside the 470 leaves 210, which still hosts one (delta 0:
    # 50); beside the 650 it leaves 30 (delta -30: 49). FGD takes the 470's GPU and strands
    # 210 that only tiny pods fill; the list's plan pairs 650 with 320, so gpuplane leaves 30.
    pod = PackPod(1000, 1024, 320, 1)
    fgd = _pair_cluster("fgd")
    assert fgd_scores(fgd, pod, np.array([0, 1]))[0].tolist() == [50, 49]
    assert choose("fgd", fgd, pod) == Choice(0, [0])
    assert choose("gpuplane", _pair_cluster("gpuplane"), pod, plan=PLAN_650_320) == Choice(1, [0])


def test_gpuplane_falls_back_to_the_bounded_fgd_rule_when_no_gpu_is_on_plan():
    # A 160 is in no pattern of the plan: gpuplane scores as FGD does and takes the first best.
    pod = PackPod(1000, 1024, 160, 1)
    assert choose("gpuplane", _pair_cluster("gpuplane"), pod, plan=PLAN_650_320) == choose(
        "fgd", _pair_cluster("fgd"), pod)


def test_whole_gpu_pods_take_the_lowest_free_gpus_and_ties_go_to_the_first_row():
    pod = PackPod(1000, 0, 1000, 2)
    for policy in ("bestfit", "fgd", "gpuplane"):
        cluster = _cluster(PackNode("a", 8000, 10**6, 4, "G2"), PackNode("b", 8000, 10**6, 4, "G2"), policy=policy)
        cluster.place(0, PackPod(0, 0, 1000, 1), [1])
        choice = choose(policy, cluster, pod, plan=NO_SHARING)
        assert choice is not None
        assert (choice.row, choice.gpus) == (0, [0, 2]), policy
    assert choose("firstfit", _cluster(PackNode("a", 8000, 10**6, 1), PackNode("b", 8000, 10**6, 1)), pod) is None


def test_placing_updates_what_is_left_and_the_tracked_fragmentation():
    cluster = _cluster(PackNode("n", 8000, 4096, 2, "T4"))
    cluster.place(0, PackPod(3000, 1024, 700, 1), [1])
    assert cluster.gpu_left.tolist() == [[1000, 300]]
    assert (cluster.cpu_left[0], cluster.mem_left[0]) == (5000, 3072)
    assert cluster.fragmentation is not None and cluster.fragmentation.frag.tolist() == [300.0]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_places_only_where_the_pod_fits(policy):
    rng = np.random.default_rng(1)
    nodes = [PackNode(f"n{i}", int(rng.integers(4, 33)) * 1000, 65536, int(rng.choice([1, 2, 4, 8])),
                      str(rng.choice(["T4", "G2"]))) for i in range(12)]
    cluster = _cluster(*nodes, classes=(PodClass(2000, 500, 1, weight=0.6), PodClass(4000, 1000, 2, weight=0.4)),
                       policy=policy)
    for _ in range(60):
        pod = PackPod(int(rng.integers(0, 8)) * 1000, 4096, int(rng.choice([0, 250, 500, 1000])), 1)
        if pod.gpu_milli == 1000:
            pod = PackPod(pod.cpu_milli, pod.memory_mib, 1000, int(rng.integers(1, 3)))
        elif pod.gpu_milli == 0:
            pod = PackPod(pod.cpu_milli, pod.memory_mib, 0, 0)
        choice = choose(policy, cluster, pod, rng=rng, plan=SharingPlan.build([500, 250, 250, 250]))
        if choice is None:
            assert not len(cluster.fits(pod))
            continue
        assert choice.row in cluster.fits(pod)
        assert len(choice.gpus) == pod.gpu_count
        cluster.place(choice.row, pod, choice.gpus)
        assert (cluster.gpu_left >= 0).all() and (cluster.cpu_left >= 0).all() and (cluster.mem_left >= 0).all()


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown packing policy"):
        choose("nope", _cluster(PackNode("n", 8000, 4096, 1)), HALF_POD)
