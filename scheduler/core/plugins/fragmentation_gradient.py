"""Score FragmentationGradient (FGD, Weng et al., ATC'23): avoid placements that fragment GPUs."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.fit import KIND_EXCLUSIVE, KIND_MIG, KIND_WEIGHTED, chosen_gpus
from scheduler.core.framework import CycleState, ScorePlugin
from scheduler.core.packed_rows import row_count


@dataclass(frozen=True)
class TypicalPod:
    """A pod class of the workload: its share per GPU, GPU count and popularity weight in
    thousandths (integers keep the fragmentation sums exact, so equal placements tie exactly)."""

    share_milli: int
    gpu_count: int
    weight_milli: int


# Until the adapter derives the mix from recent deployments: the classification's shares.
DEFAULT_TYPICAL_PODS: tuple[dict[str, float], ...] = (
    {"share_milli": 250, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 500, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 1000, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 1000, "gpu_count": 2, "weight": 0.1},
)


def _hosts(pod: TypicalPod, max_unit: np.ndarray, whole_free: np.ndarray) -> np.ndarray:
    """Which GPUs could host one of the pod's GPUs: a free whole GPU, or a unit >= its share."""
    return whole_free if pod.share_milli >= SHARE_MILLI_FULL else max_unit >= pod.share_milli


def _runs(pod: TypicalPod, host_count: np.ndarray) -> np.ndarray:
    """Whether the node can run the pod at all, from how many of its GPUs can host it."""
    return host_count >= pod.gpu_count


def fragmentation(free: np.ndarray, max_unit: np.ndarray, whole_free: np.ndarray,
                  pods: Iterable[TypicalPod]) -> np.ndarray:
    """F per node (rows), in milli-GPU x 1000: sum over typical pods m of weight_milli(m) x F(m),
    an exact integer (as float64), where

    - F(m) = all free capacity when m cannot run on the node at all;
    - else the free capacity of the GPUs that cannot host m (a whole-GPU pod needs a free whole
      GPU; a sharing pod a unit with share >= its share, ``max_unit``).
    """
    free_f = np.asarray(free, dtype=np.float64)
    ones = np.ones(free_f.shape[1])
    total = free_f @ ones  # row sums as a matrix-vector product: far faster than sum(axis=1)
    result = np.zeros(len(free_f))
    for pod in pods:
        hosts = _hosts(pod, max_unit, whole_free)
        runs = _runs(pod, row_count(hosts))
        result += pod.weight_milli * np.where(runs, total - (free_f * hosts) @ ones, total)
    return result


class FragmentationGradient(ScorePlugin):
    """raw = F_before - F_after (milli-GPU, rounded): how much the placement lowers the node's
    fragmentation (``fragmentation`` / 1000); normalized = floor(100 x sigmoid(raw / 1000)).

    The placement is evaluated on the GPU the assignment would choose (best fit), not on every
    GPU as the reference simulator does; the trace replay may use an exhaustive variant.

    Example, typical pods only "250 milli x 1, weight 1": a weighted-MPS GPU with 200 free and
    one with 1000 free; placing 250 on the full one: F_before = 200 (the 200 GPU cannot host
    250), F_after = 200 -> raw 0 -> 50. A node whose only free GPU keeps 1000: F 0 -> 0, raw 0
    -> 50; a node with 300 free on one GPU: placing 250 leaves 50, which cannot host 250 and
    the node then hosts nothing: F_before 0, F_after 50 -> raw -50 -> floor(100 x
    sigmoid(-0.05)) = 48.
    """

    NAME = "FragmentationGradient"

    def __init__(self, typical_pods: Iterable[Mapping[str, float]] = DEFAULT_TYPICAL_PODS) -> None:
        pods = [(int(p["share_milli"]), int(p.get("gpu_count", 1)), float(p["weight"])) for p in typical_pods]
        total = sum(weight for *_, weight in pods)
        if not pods or total <= 0:
            raise ValueError("FragmentationGradient needs typical pods with a positive total weight")
        # Weights as each class's share of the total, in thousandths.
        self.pods = tuple(TypicalPod(share, count, round(1000 * weight / total)) for share, count, weight in pods)

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        snapshot = state.snapshot
        need = state.need
        free = snapshot.gpu_free_milli.take(nodes, axis=0)
        max_unit = snapshot.gpu_max_unit_milli.take(nodes, axis=0)
        whole = snapshot.gpu_whole_free.take(nodes, axis=0)
        if need.multi_gpu:
            before = fragmentation(free, max_unit, whole, self.pods)
            ok = whole & (snapshot.gpu_memory_mib.take(nodes, axis=0) >= need.memory_per_gpu_mib)
            taken = ok & (np.cumsum(ok, axis=1) <= need.gpu_count)  # the lowest free indexes
            after = fragmentation(np.where(taken, 0, free), np.where(taken, 0, max_unit), whole & ~taken, self.pods)
            return np.rint((before - after) / 1000).astype(np.int64)
        return self._single_gpu_gradient(state, nodes, free, max_unit, whole)

    def _single_gpu_gradient(self, state: CycleState, nodes: np.ndarray, free: np.ndarray,
                             max_unit: np.ndarray, whole: np.ndarray) -> np.ndarray:
        """F_before - F_after when one GPU per node changes: the after state is the before state
        corrected by that GPU's change, so no second pass over every GPU is needed."""
        snapshot = state.snapshot
        need = state.need
        fit = state.fit(nodes)
        gpus = chosen_gpus(snapshot, need, fit)
        rows = np.flatnonzero(gpus >= 0)
        cols = gpus[rows]
        ids = nodes[rows]
        kind = fit.kind[rows]
        unit = fit.unit_share_milli[rows]
        old_free = free[rows, cols].astype(np.float64)
        # The chosen GPU after the placement: its usable free share and largest unit.
        slots_after = snapshot.gpu_free_slots[ids, cols] - 1
        share_after = snapshot.gpu_free_share_milli[ids, cols] - unit
        new_free = np.where(slots_after > 0, share_after, 0)
        slot_share = SHARE_MILLI_FULL // np.maximum(snapshot.replicas.take(ids), 1)
        new_max = np.where(kind == KIND_WEIGHTED, new_free,
                           np.where(slots_after > 0, np.minimum(slot_share, share_after), 0))
        mig = kind == KIND_MIG
        if mig.any():
            counts = snapshot.gpu_mig_free[ids[mig], cols[mig]].astype(np.int64)
            counts[np.arange(len(counts)), fit.mig_rows(snapshot)[rows][mig]] -= 1
            shares = snapshot.models.mig_share_milli[snapshot.model_id[ids[mig]]]
            new_free[mig] = free[rows[mig], cols[mig]] - unit[mig]
            new_max[mig] = np.where(counts > 0, shares, 0).max(axis=1)
        exclusive = kind == KIND_EXCLUSIVE
        new_free[exclusive] = 0
        new_max[exclusive] = 0
        new_free = new_free.astype(np.float64)

        free_f = free.astype(np.float64)
        ones = np.ones(free_f.shape[1])
        total = free_f @ ones
        raw = np.zeros(len(nodes))
        for pod in self.pods:
            hosts = _hosts(pod, max_unit, whole)
            hosted = (free_f * hosts) @ ones
            count = row_count(hosts)
            before = np.where(_runs(pod, count), total - hosted, total)
            old_host = hosts[rows, cols]
            # A GPU that took a placement is never a free whole GPU afterwards.
            new_host = np.zeros(len(rows), dtype=np.bool_) if pod.share_milli >= SHARE_MILLI_FULL \
                else new_max >= pod.share_milli
            total_after = total[rows] - old_free + new_free
            hosted_after = hosted[rows] - old_free * old_host + new_free * new_host
            count_after = count[rows] - old_host + new_host
            after = before.copy()
            after[rows] = np.where(_runs(pod, count_after), total_after - hosted_after, total_after)
            raw += pod.weight_milli * (before - after)
        return np.rint(raw / 1000).astype(np.int64)

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        return np.floor(100.0 / (1.0 + np.exp(-raw / 1000.0))).astype(np.int64)
