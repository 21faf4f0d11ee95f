"""Packing policies over a cluster of CPU, host memory and fractional GPUs (docs/design.md sections 6, 13).

``PackingCluster`` holds what is left on each node (GPU milli per GPU, CPU milli, memory MiB);
``fits`` is the NodeResourcesFit-like filter (CPU, memory, GPU model and GPU room), and the
scorers give whole-number scores 0..100 per candidate node as the FGD paper's simulator does:

- BestFit   100 x (1 - [0.5 (cpu_left - cpu) / 128000 + 0.5 (gpu_left - gpu) / 8000]), truncated;
- WorstFit  100 minus BestFit's bracketed term, i.e. the emptiest node first;
- FirstFit  0 everywhere: the first feasible node in the node order;
- FGD       100 x sigmoid((F_before - F_after) / 1000), truncated (``fragmentation.ClassTable``).

Ties go to the earliest node in the cluster's row order (the replay shuffles rows once per seed).
``choose`` also says which GPUs a placement takes. Pure numpy; the consolidation planner can
re-pack with the same functions.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.core.fragmentation import WHOLE_GPU_MILLI, ClassTable, FragmentationTracker

# The reference simulator's normalisers for BestFit (largest node: 128 cores, 8 GPUs).
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8 * WHOLE_GPU_MILLI


@dataclass(frozen=True)
class PackNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str = ""


@dataclass(frozen=True)
class PackPod:
    """A request: ``gpu_milli`` of one GPU when < 1000, else ``gpu_count`` whole GPUs; 0 GPUs
    is a CPU-only pod. ``gpu_models`` empty accepts any model."""

    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    gpu_count: int
    gpu_models: tuple[str, ...] = ()

    @property
    def sharing(self) -> bool:
        return self.gpu_count == 1 and 0 < self.gpu_milli < WHOLE_GPU_MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_milli * self.gpu_count


class PackingCluster:
    """Free resources per node, mutated by ``place``."""

    def __init__(self, nodes: Sequence[PackNode]) -> None:
        width = max((n.gpu_count for n in nodes), default=1) or 1
        self.names = [n.name for n in nodes]
        self.models = np.array([n.gpu_model for n in nodes], dtype=object)
        self.gpu_count = np.array([n.gpu_count for n in nodes], dtype=np.int64)
        self.gpu_left = np.where(np.arange(width)[None, :] < self.gpu_count[:, None], WHOLE_GPU_MILLI, 0).astype(np.int64)
        self.cpu_left = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.mem_left = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        self.gpu_capacity_milli = int(self.gpu_count.sum()) * WHOLE_GPU_MILLI
        self._model_masks: dict[tuple[str, ...], np.ndarray] = {}
        self.fragmentation: FragmentationTracker | None = None

    def track(self, table: ClassTable) -> None:
        """Keep each node's fragmentation over ``table``'s typical pods current from now on."""
        self.fragmentation = FragmentationTracker(table, self.gpu_left, self.cpu_left)

    def model_mask(self, models: tuple[str, ...]) -> np.ndarray:
        if models not in self._model_masks:
            self._model_masks[models] = (np.isin(self.models, models) if models
                                         else np.ones(len(self.models), dtype=np.bool_))
        return self._model_masks[models]

    def fits(self, pod: PackPod) -> np.ndarray:
        """Rows where the pod fits: CPU and memory (NodeResourcesFit), GPU model, GPU room."""
        ok = (self.cpu_left >= pod.cpu_milli) & (self.mem_left >= pod.memory_mib)
        if pod.gpu_count:
            ok &= self.model_mask(pod.gpu_models)
            if pod.sharing:
                ok &= self.gpu_left.max(axis=1) >= pod.gpu_milli
            else:
                ok &= (self.gpu_left >= WHOLE_GPU_MILLI).sum(axis=1) >= pod.gpu_count
        return np.flatnonzero(ok)

    def gpu_total_left(self, rows: np.ndarray) -> np.ndarray:
        return self.gpu_left[rows].sum(axis=1)

    def whole_gpus(self, row: int, count: int) -> list[int]:
        """The lowest-index free whole GPUs of a node."""
        return [int(g) for g in np.flatnonzero(self.gpu_left[row] >= WHOLE_GPU_MILLI)[:count]]

    def tightest_gpu(self, row: int, milli: int) -> int:
        """The GPU with the least free share that still holds ``milli`` (lowest index on ties)."""
        left = np.where(self.gpu_left[row] >= milli, self.gpu_left[row], np.iinfo(np.int64).max)
        return int(np.argmin(left))

    def default_gpus(self, row: int, pod: PackPod) -> list[int]:
        if pod.gpu_count == 0:
            return []
        if pod.sharing:
            return [self.tightest_gpu(row, pod.gpu_milli)]
        return self.whole_gpus(row, pod.gpu_count)

    def place(self, row: int, pod: PackPod, gpus: Sequence[int]) -> None:
        self.cpu_left[row] -= pod.cpu_milli
        self.mem_left[row] -= pod.memory_mib
        for gpu in gpus:
            self.gpu_left[row, gpu] -= pod.gpu_milli
        if self.fragmentation is not None:
            self.fragmentation.refresh(row, self.gpu_left, self.cpu_left)


def best_fit_scores(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> np.ndarray:
    cpu = (cluster.cpu_left[rows] - pod.cpu_milli) / MAX_SPEC_CPU_MILLI
    gpu = (cluster.gpu_total_left(rows) - pod.total_gpu_milli) / MAX_SPEC_GPU_MILLI
    return ((1.0 - (0.5 * cpu + 0.5 * gpu)) * 100).astype(np.int64)


def worst_fit_scores(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> np.ndarray:
    cpu = (cluster.cpu_left[rows] - pod.cpu_milli) / MAX_SPEC_CPU_MILLI
    gpu = (cluster.gpu_total_left(rows) - pod.total_gpu_milli) / MAX_SPEC_GPU_MILLI
    return ((0.5 * cpu + 0.5 * gpu) * 100).astype(np.int64)


def first_fit_scores(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> np.ndarray:
    return np.zeros(len(rows), dtype=np.int64)


def sigmoid_score(delta: np.ndarray) -> np.ndarray:
    """FGD's squash: 100 x sigmoid(delta / 1000), truncated to a whole number."""
    return (100.0 / (1.0 + np.exp(-delta / 1000.0))).astype(np.int64)


def fragmentation_deltas(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> np.ndarray:
    """F_before - F_after per candidate: (R, G) for a sharing pod (one column per GPU it could
    take, -inf where it does not fit), else (R, 1). Needs ``cluster.track`` first."""
    tracker = cluster.fragmentation
    if tracker is None:
        raise ValueError("fragmentation-aware scoring needs cluster.track(typical pods) first")
    if pod.sharing:
        return tracker.share_deltas(rows, cluster.gpu_left, cluster.cpu_left, pod.gpu_milli, pod.cpu_milli)
    return tracker.whole_deltas(rows, cluster.cpu_left, pod.gpu_count, pod.cpu_milli)[:, None]


def fgd_scores(cluster: PackingCluster, pod: PackPod, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FGD's node scores and, for a sharing pod, the GPU of each node it scored best on (the
    first of equal whole-number scores, as the reference does); -1 otherwise."""
    deltas = fragmentation_deltas(cluster, pod, rows)
    scores = np.where(np.isfinite(deltas), sigmoid_score(np.where(np.isfinite(deltas), deltas, 0)), -1)
    if not pod.sharing:
        return scores[:, 0], np.full(len(rows), -1)
    gpu = scores.argmax(axis=1)
    return scores[np.arange(len(rows)), gpu], gpu
