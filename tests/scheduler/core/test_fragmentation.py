"""FGD's fragmentation measure on hand-computed nodes, and the incremental tracker against it."""
from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.fragmentation import ClassTable, FragmentationTracker, PodClass, cluster_fragmentation, typical_pods

HALF = PodClass(cpu_milli=1000, gpu_milli=500, gpu_count=1, weight=0.5)
WHOLE = PodClass(cpu_milli=1000, gpu_milli=1000, gpu_count=1, weight=0.5)


def _frag(classes, left, cpu, models=None, cpu_bounded=False):
    left = np.array(left, dtype=np.int64)
    table = ClassTable.build(classes, models or ["T4"] * len(left), cpu_bounded=cpu_bounded)
    return table.node_fragmentation(left, np.array(cpu, dtype=np.int64), np.arange(len(left)))


def test_only_gpus_too_small_for_a_class_count_when_the_class_runs():
    # Class HALF: GPU 1 (300 free) cannot host 500 -> 300; WHOLE: same GPU -> 300. F = 300.
    assert _frag([HALF, WHOLE], [[1000, 300]], [4000]).tolist() == [300.0]


def test_all_idle_gpu_counts_when_the_class_cannot_run():
    # 400 CPU left: neither class runs, so all 1300 idle milli is fragment for both.
    assert _frag([HALF, WHOLE], [[1000, 300]], [400]).tolist() == [1300.0]
    # No free whole GPU: WHOLE cannot run (600 + 300 all fragment); HALF runs (300 fragment).
    assert _frag([HALF, WHOLE], [[600, 300]], [4000]).tolist() == [0.5 * 300 + 0.5 * 900]


def test_cpu_only_classes_count_all_idle_gpu_and_models_gate_access():
    cpu_only = PodClass(cpu_milli=1000, gpu_milli=0, gpu_count=0, weight=1.0)
    assert _frag([cpu_only], [[1000, 1000]], [64000]).tolist() == [2000.0]
    v100 = PodClass(cpu_milli=0, gpu_milli=1000, gpu_count=1, gpu_models=("V100M16",), weight=1.0)
    assert _frag([v100], [[1000], [1000]], [8000, 8000], models=["T4", "V100M16"]).tolist() == [1000.0, 0.0]


def test_the_cpu_bounded_measure_counts_gpus_the_cpu_left_cannot_feed():
    whole = PodClass(cpu_milli=4000, gpu_milli=1000, gpu_count=1, weight=1.0)
    # 4 free GPUs and CPU for 1 pod: FGD sees no fragment (one pod fits), the bounded measure
    # counts the 3 GPUs that CPU cannot feed; CPU for 2.5 pods leaves 1.5 GPUs' milli stranded.
    assert _frag([whole], [[1000] * 4], [4000]).tolist() == [0.0]
    assert _frag([whole], [[1000] * 4], [4000], cpu_bounded=True).tolist() == [3000.0]
    assert _frag([whole], [[1000] * 4], [10000], cpu_bounded=True).tolist() == [1500.0]
    # CPU for all GPUs' pods, or too little for one: both measures agree.
    assert _frag([whole], [[1000] * 4], [16000], cpu_bounded=True).tolist() == [0.0]
    assert _frag([whole], [[1000] * 4], [3000], cpu_bounded=True).tolist() == [4000.0]


def test_cluster_fragmentation_is_the_sum_over_nodes():
    table = ClassTable.build([HALF, WHOLE], ["T4", "T4"])
    left = np.array([[1000, 300], [600, 300]])
    assert cluster_fragmentation(table, left, np.array([4000, 4000])) == 300 + 600


def test_typical_pods_take_the_most_frequent_classes_until_the_coverage():
    pods = [(1, 500, 1, ())] * 6 + [(2, 1000, 2, ())] * 3 + [(3, 0, 0, ())]
    classes = typical_pods(pods, coverage=0.9)
    assert [(c.cpu_milli, c.weight) for c in classes] == [(1, pytest.approx(6 / 9)), (2, pytest.approx(3 / 9))]
    assert len(typical_pods(pods, coverage=1.0)) == 3


@pytest.mark.parametrize("cpu_bounded", [False, True])
def test_the_tracker_matches_a_full_measurement_after_any_placement(cpu_bounded):
    rng = np.random.default_rng(3)
    classes = [PodClass(int(c), int(m), 1 if m < 1000 else int(n), weight=float(w))
               for c, m, n, w in zip(rng.integers(0, 9000, 12), rng.choice([0, 100, 250, 500, 1000], 12),
                                      rng.integers(1, 4, 12), rng.random(12))]
    classes = [PodClass(c.cpu_milli, c.gpu_milli, 0 if c.gpu_milli == 0 else c.gpu_count, weight=c.weight)
               for c in classes]
    left = rng.choice([0, 150, 300, 500, 700, 1000], size=(40, 4)).astype(np.int64)
    cpu = rng.integers(0, 16000, 40)
    models = list(rng.choice(["T4", "P100"], 40))
    table = ClassTable.build(classes, models, cpu_bounded=cpu_bounded)
    tracker = FragmentationTracker(table, left, cpu)
    rows = np.arange(40)
    np.testing.assert_allclose(tracker.frag, table.node_fragmentation(left, cpu, rows))
    share = tracker.share_deltas(rows, left, cpu, milli=250, cpu=2000)
    for r, g in zip(*np.nonzero(left >= 250)):
        after = left.copy()
        after[r, g] -= 250
        cpu_after = cpu.copy()
        cpu_after[r] -= 2000
        expected = tracker.frag[r] - table.node_fragmentation(after[[r]], cpu_after[[r]], np.array([r]))[0]
        assert share[r, g] == pytest.approx(expected)
    assert np.isneginf(share[left < 250]).all()
    whole = tracker.whole_deltas(rows, cpu, gpus=1, cpu=1000)
    for r in np.flatnonzero((left >= 1000).any(axis=1)):
        after = left.copy()
        after[r, int(np.flatnonzero(left[r] >= 1000)[0])] = 0
        expected = tracker.frag[r] - table.node_fragmentation(after[[r]], cpu[[r]] - 1000, np.array([r]))[0]
        assert whole[r] == pytest.approx(expected)
    # refresh after a change keeps the cache equal to a full measurement
    left[5, 0] = 0
    cpu[5] -= 100
    tracker.refresh(5, left, cpu)
    np.testing.assert_allclose(tracker.frag, table.node_fragmentation(left, cpu, rows))
