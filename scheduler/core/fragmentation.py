"""GPU fragmentation as FGD measures it (Weng et al., ATC'23; docs/design.md sections 6 and 13).

For a node and a "typical pod" class m, the node's idle GPU milli counts as fragment when m
cannot run there at all (GPU model, CPU or GPUs lacking; a CPU-only class always counts all of
it); when m can run, only the free milli of GPUs too small to host one of m's GPUs counts. A
node's fragmentation F is the sum over classes weighted by their share of the workload; the
cluster's is the sum over nodes.

``cpu_bounded`` (gpuplane's measure, not FGD's): FGD asks whether *one* more pod of m fits, so a
node with 4 free GPUs and CPU for one of m's pods shows no fragment for m although 3 of those
GPUs are stranded. The bounded measure counts the hosting GPUs' milli only in the proportion
the CPU left can feed: ``hosted x min(1, (cpu_left / cpu_m) / (m's pods the GPUs could take))``.

Pure numpy over arrays shaped (nodes, GPUs per node): a node with fewer GPUs pads its row with
GPUs of 0 free milli, which neither host anything nor add to any sum.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

WHOLE_GPU_MILLI = 1000


@dataclass(frozen=True)
class PodClass:
    """A pod shape: CPU milli, milli of each GPU (1000 = whole GPUs), GPU count (0 = CPU-only),
    the GPU models it accepts (empty = any) and its weight (share of the typical set)."""

    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    gpu_models: tuple[str, ...] = ()
    weight: float = 1.0


def typical_pods(pods: Iterable[tuple[int, int, int, tuple[str, ...]]], coverage: float = 0.95) -> list[PodClass]:
    """The classes (cpu, gpu milli, gpu count, models) of ``pods``, most frequent first, taken
    until they cover ``coverage`` of the pods, each weighted by its share of the taken set.
    Equal counts keep first-seen order, so the result is deterministic."""
    counts = Counter(pods)
    total = sum(counts.values())
    if total == 0:
        return []
    taken: list[tuple[tuple[int, int, int, tuple[str, ...]], int]] = []
    covered = 0
    for shape, count in counts.most_common():
        taken.append((shape, count))
        covered += count
        if covered >= coverage * total:
            break
    return [PodClass(cpu, milli, num, models, count / covered) for (cpu, milli, num, models), count in taken]


def class_usable(gpu_count: np.ndarray, cpu: np.ndarray, access: np.ndarray | None, hosted: np.ndarray,
                 host_count: np.ndarray, cpu_left: np.ndarray, *, cpu_bounded: bool) -> np.ndarray:
    """What each typical class can use of each node's free GPU capacity (K, R), milli-GPU; its
    fragment there is the node's free capacity minus this (the module docstring's rule).

    Per class (K,): its GPU count (0 = CPU-only) and CPU milli; per class and node (K, R): whether
    its GPU models include the node's (``access``; None: every class may use every node), how
    many of the node's GPUs could host one of its GPUs (``host_count``) and their free milli
    summed (``hosted``); per node ``cpu_left`` as (1, R) (or per class, (K, R)). The class runs on
    a node when it may use the model, the hosts take at least one pod and the CPU is there; then
    it can use the hosts' milli, else nothing. With ``cpu_bounded`` the hosts of a class that
    asks for CPU count only in the proportion the CPU left can feed (gpuplane's measure):
    ``hosted x min(1, (cpu_left / cpu) / (pods the hosts take))``.
    """
    k = slice(None), None
    # At least one pod's GPUs are free (a comparison: integer division costs 20x more), and its
    # CPU (one comparison per node when no class asks for CPU).
    cpu_ok = cpu_left >= cpu[k] if cpu.any() else cpu_left >= 0
    runs = (host_count >= gpu_count[k]) & cpu_ok
    if not gpu_count.all():  # CPU-only classes run nowhere GPUs count
        runs &= (gpu_count > 0)[k]
    if access is not None:
        runs &= access
    if cpu_bounded and cpu.any():
        # Pods of the class the free GPUs take; most classes take one GPU: no division for them.
        gpu_pods = host_count
        if (gpu_count > 1).any():
            gpu_pods = host_count // np.maximum(gpu_count[k], 1)
        # A continuous ratio, not whole pods: on seeds 42-44 it beat the floor (95.77 vs 95.71).
        ratio = np.minimum(1.0, (cpu_left / np.maximum(cpu[k], 1)) / np.maximum(gpu_pods, 1))
        return hosted * np.where(runs, np.where(cpu[k] > 0, ratio, 1.0), 0.0)
    return hosted * runs


def class_fragment(gpu_count: np.ndarray, cpu: np.ndarray, access: np.ndarray | None, total: np.ndarray,
                   hosted: np.ndarray, host_count: np.ndarray, cpu_left: np.ndarray, *,
                   cpu_bounded: bool) -> np.ndarray:
    """Each typical class's fragment on each node (K, R), milli-GPU: the node's free capacity
    (``total``, (1, R)) minus what the class can use of it (``class_usable``, same arguments)."""
    return total - class_usable(gpu_count, cpu, access, hosted, host_count, cpu_left, cpu_bounded=cpu_bounded)


@dataclass(frozen=True)
class ClassTable:
    """Typical pods as column vectors, plus which node each class may run on (its GPU model)."""

    cpu: np.ndarray  # (K,)
    milli: np.ndarray  # (K,) per-GPU milli; 0 for CPU-only classes
    count: np.ndarray  # (K,)
    weight: np.ndarray  # (K,)
    access: np.ndarray  # (K, N) bool
    cpu_bounded: bool = False

    @classmethod
    def build(cls, classes: Sequence[PodClass], node_models: Sequence[str], *, cpu_bounded: bool = False) -> ClassTable:
        models = np.asarray(node_models, dtype=object)
        access = np.ones((len(classes), len(models)), dtype=np.bool_)
        for k, pod in enumerate(classes):
            if pod.gpu_models:
                access[k] = np.isin(models, pod.gpu_models)
        return cls(
            cpu=np.array([p.cpu_milli for p in classes], dtype=np.int64),
            milli=np.array([p.gpu_milli if p.gpu_count else 0 for p in classes], dtype=np.int64),
            count=np.array([p.gpu_count for p in classes], dtype=np.int64),
            weight=np.array([p.weight for p in classes], dtype=np.float64),
            access=access,
            cpu_bounded=cpu_bounded,
        )

    def _frag(self, rows: np.ndarray, total: np.ndarray, hosted_sum: np.ndarray, host_count: np.ndarray,
              cpu_left: np.ndarray) -> np.ndarray:
        """Per-class fragment (K, R) from per-class host counts (K, R) and hosted milli."""
        return class_fragment(self.count, self.cpu, self.access[:, rows], total, hosted_sum, host_count, cpu_left,
                              cpu_bounded=self.cpu_bounded)

    def node_fragmentation(self, gpu_left: np.ndarray, cpu_left: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """F of each node in ``rows`` (float milli-GPU), given its GPUs' free milli (R, G)."""
        left = gpu_left.astype(np.int64)
        host = left[None, :, :] >= np.maximum(self.milli, 1)[:, None, None]  # (K, R, G)
        hosted = (host * left[None]).sum(axis=2)
        total = left.sum(axis=1)[None, :]
        frag = self._frag(rows, total, hosted, host.sum(axis=2), cpu_left[None, :])
        return self.weight @ frag

    def stats(self, gpu_left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per class and node (K, R): how many GPUs could host one of the class's GPUs, and
        their free milli summed."""
        left = gpu_left.astype(np.int64)
        host = left[None, :, :] >= np.maximum(self.milli, 1)[:, None, None]
        return host.sum(axis=2), (host * left[None]).sum(axis=2)


class FragmentationTracker:
    """Each node's F and per-class sums, kept current by ``refresh`` after a placement, so that
    scoring a pod costs O(classes x candidates) instead of re-measuring every GPU."""

    def __init__(self, table: ClassTable, gpu_left: np.ndarray, cpu_left: np.ndarray) -> None:
        self.table = table
        self.rows = np.arange(len(gpu_left))
        self.count, self.hosted = table.stats(gpu_left)
        self.total = gpu_left.sum(axis=1).astype(np.int64)
        self.frag = table.weight @ table._frag(self.rows, self.total[None, :], self.hosted, self.count,
                                                cpu_left[None, :])

    def refresh(self, row: int, gpu_left: np.ndarray, cpu_left: np.ndarray) -> None:
        one = np.array([row])
        count, hosted = self.table.stats(gpu_left[one])
        self.count[:, row], self.hosted[:, row] = count[:, 0], hosted[:, 0]
        self.total[row] = int(gpu_left[row].sum())
        self.frag[row] = (self.table.weight @ self.table._frag(
            one, self.total[one][None, :], hosted, count, cpu_left[one][None, :]))[0]

    def _after(self, rows: np.ndarray, count: np.ndarray, hosted: np.ndarray, total: np.ndarray,
               cpu: np.ndarray) -> np.ndarray:
        return self.table.weight @ self.table._frag(rows, total[None, :], hosted, count, cpu[None, :])

    def share_deltas(self, rows: np.ndarray, gpu_left: np.ndarray, cpu_left: np.ndarray, milli: int,
                     cpu: int) -> np.ndarray:
        """F_before - F_after (R, G) for ``milli`` of one GPU (and ``cpu``) taken on each GPU of
        each node in ``rows``; -inf where the GPU lacks room. Equal (node, free) pairs are
        evaluated once."""
        left = gpu_left[rows]
        out = np.full(left.shape, -np.inf)
        valid_r, valid_g = np.nonzero(left >= milli)
        if not len(valid_r):
            return out
        keys = valid_r * 4096 + left[valid_r, valid_g]
        unique, inverse = np.unique(keys, return_inverse=True)
        cand = unique // 4096
        node = rows[cand]
        value = (unique % 4096)[None, :]
        need = np.maximum(self.table.milli, 1)[:, None]
        host_before = value >= need
        host_after = value - milli >= need
        count = self.count[:, node] - host_before + host_after
        hosted = self.hosted[:, node] - host_before * value + host_after * (value - milli)
        after = self._after(node, count, hosted, self.total[node] - milli, cpu_left[node] - cpu)
        out[valid_r, valid_g] = (self.frag[node] - after)[inverse]
        return out

    def whole_deltas(self, rows: np.ndarray, cpu_left: np.ndarray, gpus: int, cpu: int) -> np.ndarray:
        """F_before - F_after (R,) for ``gpus`` whole GPUs (0: a CPU-only pod) and ``cpu`` taken:
        a free whole GPU hosts every class, so each class loses that many hosts and their milli."""
        taken = gpus * WHOLE_GPU_MILLI
        after = self._after(rows, self.count[:, rows] - gpus, self.hosted[:, rows] - taken,
                            self.total[rows] - taken, cpu_left[rows] - cpu)
        return self.frag[rows] - after


def cluster_fragmentation(table: ClassTable, gpu_left: np.ndarray, cpu_left: np.ndarray) -> float:
    """The cluster's fragmentation: the sum of its nodes' (milli-GPU)."""
    rows = np.arange(len(gpu_left))
    return float(table.node_fragmentation(gpu_left, cpu_left, rows).sum())
