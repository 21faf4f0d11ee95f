"""Online packing policies: pick a node (and its GPUs) for one pod, or none (docs/design.md section 13).

Every policy filters with ``PackingCluster.fits`` and scores with the functions of
``scheduler.core.packing``; the highest score wins and ties go to the earliest row.

These are the trace replay's baselines (docs/design.md section 13), the reference simulator's
policies as the FGD paper measured them. gpuplane's own rule is not here: it is the API's
profiles (``scheduler.core.profiles``: FragmentationGradient over the CPU-bounded measure and
SharingPlan), which the replay runs through ``Scheduler.schedule`` (``bench/trace_profiles.py``);
why the rule is what it is, and what was tried, is docs/packing.md.
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

POLICIES = ("random", "bestfit", "firstfit", "worstfit", "fgd")


@dataclass(frozen=True)
class Choice:
    row: int
    gpus: list[int]


Scorer = Callable[[PackingCluster, PackPod, np.ndarray], np.ndarray]
_SIMPLE: dict[str, Scorer] = {"bestfit": best_fit_scores, "firstfit": first_fit_scores,
                              "worstfit": worst_fit_scores}


def choose(policy: str, cluster: PackingCluster, pod: PackPod, *, rng: np.random.Generator | None = None) -> Choice | None:
    """The node and GPUs ``policy`` gives ``pod``; None when it fits nowhere. ``fgd`` needs
    ``cluster.track(class_table(...))`` first."""
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
    raise ValueError(f"unknown packing policy {policy!r}; one of {', '.join(POLICIES)}")


def class_table(classes: Sequence[PodClass], node_models: Sequence[str]) -> ClassTable:
    """The typical-pod table FGD scores with (its own measure, not bounded by CPU)."""
    return ClassTable.build(classes, node_models)


def _fgd_choice(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> Choice:
    """The best squashed score over the tracked measure; a sharing pod takes the GPU it scored on."""
    scores, gpus = fgd_scores(cluster, pod, rows)
    best = int(np.argmax(scores))
    row = int(rows[best])
    return Choice(row, [int(gpus[best])] if pod.sharing else cluster.default_gpus(row, pod))
