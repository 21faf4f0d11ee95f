"""The trace replay's baselines (filter, scorers, FGD and BestFit) on small hand-computed clusters.

gpuplane's own rule is the API's profiles: tests/scheduler/core/test_packing_rule.py."""
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
from scheduler.core.packing_policies import POLICIES, choose, class_table

HALF_POD = PackPod(cpu_milli=1000, memory_mib=1024, gpu_milli=500, gpu_count=1)
HALF_CLASS = (PodClass(0, 500, 1),)


def _cluster(*nodes: PackNode, classes=HALF_CLASS) -> PackingCluster:
    cluster = PackingCluster(nodes)
    cluster.track(class_table(list(classes), list(cluster.models)))
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


def test_whole_gpu_pods_take_the_lowest_free_gpus_and_ties_go_to_the_first_row():
    pod = PackPod(1000, 0, 1000, 2)
    for policy in ("bestfit", "fgd"):
        cluster = _cluster(PackNode("a", 8000, 10**6, 4, "G2"), PackNode("b", 8000, 10**6, 4, "G2"))
        cluster.place(0, PackPod(0, 0, 1000, 1), [1])
        choice = choose(policy, cluster, pod)
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
    cluster = _cluster(*nodes, classes=(PodClass(2000, 500, 1, weight=0.6), PodClass(4000, 1000, 2, weight=0.4)))
    for _ in range(60):
        pod = PackPod(int(rng.integers(0, 8)) * 1000, 4096, int(rng.choice([0, 250, 500, 1000])), 1)
        if pod.gpu_milli == 1000:
            pod = PackPod(pod.cpu_milli, pod.memory_mib, 1000, int(rng.integers(1, 3)))
        elif pod.gpu_milli == 0:
            pod = PackPod(pod.cpu_milli, pod.memory_mib, 0, 0)
        choice = choose(policy, cluster, pod, rng=rng)
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
