"""Online packing policies: pick a node (and its GPUs) for one pod, or none (DESIGN.md section 13).

Every policy filters with ``PackingCluster.fits`` and scores with the functions of
``scheduler.core.packing``; the highest score wins and ties go to the earliest row.

``gpuplane`` is FGD's rule (squashed score, ties to the earliest row, the GPU it scored best
on) over a CPU-bounded fragmentation measure (``ClassTable.build(..., cpu_bounded=True)``; build
the table with ``class_table``). Why: on the default trace at 130 % (FGD, seed 42) 4.4 % of GPU
milli stays idle; 2.8 points are GPUs holding one 810-milli pod (only the rare <= 190-milli
pods can share them: inherent), and of the other 1.5 points 0.8 sat on nodes whose CPU or
memory was exhausted by pods FGD placed one at a time, each "fitting". Counting the GPUs the
CPU left cannot feed as fragment cuts that to 0.56: 95.76 +- 0.02 against FGD's 95.42 +- 0.08
over seeds 42-51 (96.0 not reached; per list in BENCHMARKS.md "Trace replay").

Tried and rejected. With FGD's measure (seed 42, where FGD gives 95.57): the unsquashed delta
(94.45), BestFit or WorstFit breaking FGD's ties (95.37 / 88.75), sigmoid temperatures 500 and
2000 (95.33 / 95.44), every pod class as typical (95.30), classes weighted by GPU milli (95.22),
the tightest GPU among tied GPUs (= FGD), sum-of-squares gap balancing for sharing pods as
tie-break (95.50) or alone (94.42), an expected-waste value of the gap left as tie-break (95.48)
or added to the delta (94.69-95.40), CPU-only pods sent to nodes without free GPUs (95.59).
With the bound counted in whole pods (seeds 42-44, 95.71): temperatures 250 / 500 (95.67 /
95.70), the tightest GPU among tied candidates of all nodes (95.71), sum-of-squares tie-break
(95.74), a sharing class's pods per GPU as hosted milli / milli (95.29). With the continuous
bound kept here (seeds 42-44, 95.77): memory bounded too (95.80: within noise, not worth a
memory column in the tracker), the bound scaled by 0.7 / 1.4 (95.71-95.74), temperature 2000
(95.31). The squash's coarse ties, broken by the random node order, still beat finer orders.
Also rejected (seeds 42-44, 95.77 as kept): a penalty for a sharing pod opening an untouched
GPU, 30 / 100 / 300 milli off the delta (95.78 / 95.71 / 95.68); a bonus for the gap left in
proportion to the typical sharing classes that fit it, 100 / 400 / 1500 (95.77 / 95.74 /
95.66); coarser squash, score // 2 or // 3 (95.74 / 95.72); CPU-only pods' ties broken by
fewest free GPUs, most or least CPU left, or CPU per free GPU milli (95.77-95.78: CPU-only
pods barely move the measure); the bound's ratio raised to 0.25 / 0.35 / 0.5 / 0.7 / 2
(95.81 / 95.79 / 95.85 / 95.73 / 95.66: not monotone). The ratio's square root over seeds
42-51 gives 95.82 (seeds 95.76-95.87) against 95.76 (95.73-95.80), but on seeds 42-44 it
lowers multigpu20 (95.97 vs 96.02) for gpushare40 94.27 vs 94.23 (gpuspec10 95.82, cpu050
95.78, about the 10-seed figures): not adopted, and still short of 96.0. Why 96.0 is out of reach of placement alone (seed 42 at 130 %): 952 GPUs
hold one 810-milli pod and nothing else (2.91 % of capacity idle) while 88 + 26 of the
list's tiny pods (160 and 110 milli) already sit beside an 810 pod; the protocol places every
pod that fits, so those 190-milli gaps stay.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.core.fragmentation import ClassTable, PodClass
from scheduler.core.packing import (
    PackingCluster,
    PackPod,
    best_fit_scores,
    fgd_scores,
    first_fit_scores,
    worst_fit_scores,
)

POLICIES = ("random", "bestfit", "firstfit", "worstfit", "fgd", "gpuplane")


@dataclass(frozen=True)
class Choice:
    row: int
    gpus: list[int]


Scorer = Callable[[PackingCluster, PackPod, np.ndarray], np.ndarray]
_SIMPLE: dict[str, Scorer] = {"bestfit": best_fit_scores, "firstfit": first_fit_scores,
                              "worstfit": worst_fit_scores}


def choose(policy: str, cluster: PackingCluster, pod: PackPod, *, rng: np.random.Generator | None = None) -> Choice | None:
    """The node and GPUs ``policy`` gives ``pod``; None when it fits nowhere."""
    rows = cluster.fits(pod)
    if not len(rows):
        return None
    if policy == "random":
        generator = rng if rng is not None else np.random.default_rng()
        row = int(rows[generator.integers(len(rows))])
        return Choice(row, cluster.default_gpus(row, pod))
    if policy in _SIMPLE:
        row = int(rows[int(np.argmax(_SIMPLE[policy](cluster, pod, rows)))])
        return Choice(row, cluster.default_gpus(row, pod))
    if policy == "fgd":
        return _fgd_choice(cluster, pod, rows)
    if policy == "gpuplane":
        tracker = cluster.fragmentation
        if tracker is None or not tracker.table.cpu_bounded:
            raise ValueError("gpuplane scores with the CPU-bounded measure: cluster.track(class_table('gpuplane', ...))")
        return _fgd_choice(cluster, pod, rows)
    raise ValueError(f"unknown packing policy {policy!r}; one of {', '.join(POLICIES)}")


def class_table(policy: str, classes: Sequence[PodClass], node_models: Sequence[str]) -> ClassTable:
    """The typical-pod table ``policy`` scores with: CPU-bounded for gpuplane, FGD's otherwise."""
    return ClassTable.build(classes, node_models, cpu_bounded=policy == "gpuplane")


def _fgd_choice(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> Choice:
    """The best squashed score over the tracked measure; a sharing pod takes the GPU it scored on."""
    scores, gpus = fgd_scores(cluster, pod, rows)
    best = int(np.argmax(scores))
    row = int(rows[best])
    return Choice(row, [int(gpus[best])] if pod.sharing else cluster.default_gpus(row, pod))
