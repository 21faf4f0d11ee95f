"""Each node's fragmentation over a snapshot's columns, kept current between cycles.

``scheduler.core.fragmentation`` defines the measure (FGD's, optionally bounded by the CPU a node
has left); this module applies it to a ``ClusterSnapshot``. A GPU *hosts* one GPU of a typical
class when the largest unit one placement could get there (``gpu_max_unit_milli``) holds the
class's share per GPU (1000 for whole-GPU classes: a free whole GPU, or an untouched weighted
GPU); a node's free capacity is ``gpu_free_milli`` summed. Per class and node the hosting GPUs
are counted and their free milli summed: (K, N) arrays, from which a node's F follows.

``NodeFragmentation.current`` keeps those arrays and F per snapshot and typical-pod table, and
recomputes only the rows written since it last looked (``ClusterSnapshot.row_version``): a
placement changes one node, so a cycle pays O(K x changed nodes x GPUs) to bring them up to
date, then O(K x candidates) for the gradients. No per-node Python loop anywhere.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler.core.fragmentation import WHOLE_GPU_MILLI, class_usable, typical_pods

if TYPE_CHECKING:
    from scheduler.core.snapshot import ClusterSnapshot


@dataclass(frozen=True)
class TypicalPods:
    """Typical pod classes as columns: share per GPU (1000 = whole GPUs, 0 for CPU-only), GPU
    count (0 = CPU-only), CPU milli, weight (shares of 1) and the GPU models each accepts (catalog
    keys or families; empty = any)."""

    milli: np.ndarray  # (K,)
    count: np.ndarray  # (K,)
    cpu: np.ndarray  # (K,)
    weight: np.ndarray  # (K,) float, sums to 1
    models: tuple[tuple[str, ...], ...]
    cpu_bounded: bool = True

    @classmethod
    def build(cls, pods: Iterable[Mapping[str, Any]], *, cpu_bounded: bool = True) -> TypicalPods:
        """From ``{"share_milli", "gpu_count", "weight", "cpu_milli"?, "gpu_models"?}`` mappings.

        Raises ``ValueError`` for no classes, a negative weight or a total weight of 0."""
        rows = [(int(p.get("share_milli", 0)), int(p.get("gpu_count", 1)), int(p.get("cpu_milli", 0)),
                 float(p["weight"]), tuple(str(m) for m in p.get("gpu_models", ()) or ())) for p in pods]
        total = sum(weight for *_, weight, _models in rows)
        if not rows or total <= 0 or any(weight < 0 for *_, weight, _models in rows):
            raise ValueError("typical pods need non-negative weights with a positive total")
        return cls(
            milli=np.array([milli if count else 0 for milli, count, *_ in rows], dtype=np.int64),
            count=np.array([count for _, count, *_ in rows], dtype=np.int64),
            cpu=np.array([cpu for _, _, cpu, *_ in rows], dtype=np.int64),
            weight=np.array([weight / total for *_, weight, _models in rows], dtype=np.float64),
            models=tuple(models for *_, models in rows),
            cpu_bounded=cpu_bounded,
        )

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def access(self, keys: tuple[str, ...], families: tuple[str, ...],
               accepts: Callable[[tuple[str, ...], str, str], bool]) -> np.ndarray:
        """(K, models) bool: which models (catalog keys and their families; "" = unknown) each
        class accepts, by ``accepts(accepted, key, family)``."""
        return np.array([[bool(key) and accepts(accepted, key, family) for key, family in zip(keys, families, strict=True)]
                         for accepted in self.models], dtype=np.bool_).reshape(len(self.models), len(keys))

    def fragment(self, access: np.ndarray | None, total: np.ndarray, hosted: np.ndarray, count: np.ndarray,
                 cpu_left: np.ndarray) -> np.ndarray:
        """F per node (R,): the classes' fragments (``class_fragment``) weighted and summed:
        ``total - sum_k w_k x (what class k can use)``, the weights summing to 1."""
        usable = class_usable(self.count, self.cpu, access, hosted, count, cpu_left, cpu_bounded=self.cpu_bounded)
        return np.asarray(total).reshape(-1) - self.weight @ usable


def observed_typical_pods(shapes: Iterable[tuple[int, int, int, tuple[str, ...]]], minimum: int = 20,
                          coverage: float = 0.95) -> list[dict[str, Any]] | None:
    """Typical pods (in ``TypicalPods.build`` form) from observed pods' (CPU milli, share per GPU,
    GPU count, GPU models), most frequent first until ``coverage`` of them (FGD's rule); None
    below ``minimum`` pods (too few to stand for a workload)."""
    listed = [(int(cpu), int(share) if count else 0, int(count), tuple(models))
              for cpu, share, count, models in shapes]
    if len(listed) < minimum:
        return None
    return [{"share_milli": c.gpu_milli, "gpu_count": c.gpu_count, "cpu_milli": c.cpu_milli,
             "gpu_models": list(c.gpu_models), "weight": round(c.weight, 6)}
            for c in typical_pods(listed, coverage)]


class NodeFragmentation:
    """Per class and node: hosting GPUs and their free milli; per node: free milli and F."""

    def __init__(self, table: TypicalPods, snapshot: ClusterSnapshot, access_by_model: np.ndarray) -> None:
        self.table = table
        self.models = len(snapshot.models.keys)
        self.access_by_model = access_by_model
        # Model id 0 is "unknown": no class runs there, but no node of it is ever feasible either.
        self.any_model = bool(access_by_model[:, 1:].all())
        size = len(snapshot)
        classes = len(table.weight)
        # Per class and node, the hosting GPUs (rows 0..K-1) and their free milli (K..2K-1), in one
        # int32 block: a cycle gathers its candidates' columns in one take, half the bytes of int64.
        self.sums = np.zeros((2 * classes, size), dtype=np.int32)
        self.count, self.hosted = self.sums[:classes], self.sums[classes:]
        self.need = np.maximum(table.milli, 1).astype(np.int32)[:, None]
        self.total = np.zeros(size, dtype=np.int64)
        self.frag = np.zeros(size, dtype=np.float64)
        self.seen = np.full(size, -1, dtype=np.int64)

    @classmethod
    def current(cls, table: TypicalPods, snapshot: ClusterSnapshot,
                accepts: Callable[[tuple[str, ...], str, str], bool]) -> NodeFragmentation:
        """The snapshot's figures for ``table``, rows written since the last call recomputed.
        ``accepts`` says whether a class's GPU model list accepts a model (see ``TypicalPods.access``)."""
        key = ("NodeFragmentation", table)
        cache = snapshot.derived.get(key)
        if not isinstance(cache, cls) or cache.models != len(snapshot.models.keys) or len(cache.seen) != len(snapshot):
            if len(snapshot.derived) > 8:  # tables of profiles no longer in use
                snapshot.derived.clear()
            access = table.access(snapshot.models.keys, snapshot.models.families, accepts)
            cache = snapshot.derived[key] = cls(table, snapshot, access)
        cache._refresh(snapshot)
        return cache

    def _refresh(self, snapshot: ClusterSnapshot) -> None:
        stale = np.flatnonzero(snapshot.row_version != self.seen)
        if not len(stale):
            return
        free = snapshot.gpu_free_milli.take(stale, axis=0)
        unit = snapshot.gpu_max_unit_milli.take(stale, axis=0)
        hosts = unit[None, :, :] >= self.need[:, :, None]  # (K, S, G)
        self.count[:, stale] = hosts.sum(axis=2)
        self.hosted[:, stale] = (hosts * free[None]).sum(axis=2)
        self.total[stale] = free.sum(axis=1)
        self.frag[stale] = self.table.fragment(self.access(snapshot, stale), self.total[stale][None, :],
                                               self.hosted[:, stale], self.count[:, stale],
                                               snapshot.cpu_free_milli.take(stale)[None, :])
        self.seen[stale] = snapshot.row_version.take(stale)

    def access(self, snapshot: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray | None:
        """(K, R): which of ``nodes`` each class may run on (its GPU models); None when every
        class accepts every model of the snapshot."""
        if self.any_model:
            return None
        return self.access_by_model.take(snapshot.model_id.take(nodes), axis=1)

    def after_one_gpu(self, snapshot: ClusterSnapshot, nodes: np.ndarray, old: tuple[np.ndarray, np.ndarray],
                      new: tuple[np.ndarray, np.ndarray], cpu_taken: int) -> np.ndarray:
        """F of each node once one of its GPUs goes from (free milli, largest unit) ``old`` to
        ``new`` (per node) and ``cpu_taken`` of its CPU is held."""
        old_free, old_unit = old
        new_free, new_unit = new
        host_before = old_unit >= self.need
        host_after = new_unit >= self.need
        sums = self.sums.take(nodes, axis=1)
        classes = len(self.need)
        count, hosted = sums[:classes], sums[classes:]
        count -= host_before
        count += host_after
        # Products rather than masked ufuncs (``where=``), which are several times slower.
        hosted -= host_before * old_free.astype(np.int32, copy=False)
        hosted += host_after * new_free.astype(np.int32, copy=False)
        total = (self.total.take(nodes) - old_free + new_free)[None, :]
        cpu = (snapshot.cpu_free_milli.take(nodes) - cpu_taken)[None, :]
        return self.table.fragment(self.access(snapshot, nodes), total, hosted, count, cpu)

    def after_whole_gpus(self, snapshot: ClusterSnapshot, nodes: np.ndarray, gpus: int, cpu_taken: int) -> np.ndarray:
        """F of each node once ``gpus`` of its free whole GPUs (each hosting every class) and
        ``cpu_taken`` of its CPU are held (``gpus`` 0: a CPU-only pod)."""
        taken = gpus * WHOLE_GPU_MILLI
        cpu = (snapshot.cpu_free_milli.take(nodes) - cpu_taken)[None, :]
        return self.table.fragment(self.access(snapshot, nodes), (self.total.take(nodes) - taken)[None, :],
                                   self.hosted.take(nodes, axis=1) - taken, self.count.take(nodes, axis=1) - gpus,
                                   cpu)
