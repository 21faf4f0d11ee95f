"""Online packing policies: pick a node (and its GPUs) for one pod, or none (DESIGN.md section 13).

Every policy filters with ``PackingCluster.fits`` and scores with the functions of
``scheduler.core.packing``; the highest score wins and ties go to the earliest row.

``gpuplane`` is FGD without its squash: the fragmentation delta itself decides (a sigmoid
truncated to whole numbers makes most candidates tie), BestFit breaks what still ties, and inside
a node a sharing pod takes the GPU with the best delta, then the tightest one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scheduler.core.packing import (
    PackingCluster,
    PackPod,
    best_fit_scores,
    fgd_scores,
    first_fit_scores,
    fragmentation_deltas,
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
        scores, gpus = fgd_scores(cluster, pod, rows)
        best = int(np.argmax(scores))
        row = int(rows[best])
        return Choice(row, [int(gpus[best])] if pod.sharing else cluster.default_gpus(row, pod))
    if policy == "gpuplane":
        return _gpuplane(cluster, pod, rows)
    raise ValueError(f"unknown packing policy {policy!r}; one of {', '.join(POLICIES)}")


def _gpuplane(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> Choice:
    deltas = fragmentation_deltas(cluster, pod, rows)
    # Deltas are weighted sums of milli: round away float noise so equal placements tie exactly.
    deltas = np.where(np.isfinite(deltas), np.round(deltas, 6), -np.inf)
    if pod.sharing:
        # Within a node: the best delta, then the GPU with the least room left.
        left = cluster.gpu_left[rows].astype(np.float64)
        key = np.where(np.isfinite(deltas), deltas * 1e4 - left / 1e3, -np.inf)
        gpu = key.argmax(axis=1)
        node_delta = deltas[np.arange(len(rows)), gpu]
    else:
        gpu = np.full(len(rows), -1)
        node_delta = deltas[:, 0]
    fit = best_fit_scores(cluster, pod, rows)
    best = np.flatnonzero(node_delta == node_delta.max())
    pick = int(best[int(np.argmax(fit[best]))])
    row = int(rows[pick])
    return Choice(row, [int(gpu[pick])] if pod.sharing else cluster.default_gpus(row, pod))
