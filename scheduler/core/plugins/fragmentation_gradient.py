"""Score FragmentationGradient (FGD, Weng et al., ATC'23): avoid placements that fragment GPUs.

The measure is ``scheduler.core.fragmentation``'s (docs/design.md sections 6 and 13), read from the
snapshot's columns: a typical pod class also needs its CPU free on the node and, when it names
GPU models, a node of one of them; a GPU hosts one of its GPUs when its largest free unit holds
the class's share (on weighted-MPS nodes, the GPU's free share, as in the trace replay's measure).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.fit import KIND_EXCLUSIVE, KIND_MIG, KIND_WEIGHTED, chosen_gpus
from scheduler.core.fragmentation import typical_pods
from scheduler.core.framework import CycleState, ScorePlugin
from scheduler.core.packed_rows import row_count
from scheduler.core.plugins.capability_match import accepts_model

if TYPE_CHECKING:
    from scheduler.core.snapshot import ClusterSnapshot


@dataclass(frozen=True)
class TypicalPod:
    """A pod class of the workload: its share per GPU, GPU count and popularity weight in
    thousandths (integers keep the fragmentation sums exact, so equal placements tie exactly),
    the CPU it requests and the GPU models (keys or families) it accepts (empty = any)."""

    share_milli: int
    gpu_count: int
    weight_milli: int
    cpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()


# When the observed workload is not known (``plugin_args`` give it): the classification's shares.
DEFAULT_TYPICAL_PODS: tuple[dict[str, float], ...] = (
    {"share_milli": 250, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 500, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 1000, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 1000, "gpu_count": 2, "weight": 0.1},
)


def observed_typical_pods(shapes: Iterable[tuple[int, int]], minimum: int = 20) -> list[dict[str, Any]] | None:
    """Typical pods from live placements' (share per GPU, GPU count), most frequent first until
    95 % are covered, in ``typical_pods`` argument form; None below ``minimum`` placements (too
    few to stand for the workload: the shipped defaults then apply)."""
    listed = [(0, int(share), int(count), ()) for share, count in shapes if count > 0 and share > 0]
    if len(listed) < minimum:
        return None
    return [{"share_milli": c.gpu_milli, "gpu_count": c.gpu_count, "weight": c.weight}
            for c in typical_pods(listed)]


def _hosts(pod: TypicalPod, max_unit: np.ndarray, whole_free: np.ndarray) -> np.ndarray:
    """Which GPUs could host one of the pod's GPUs: a free whole GPU, or a unit >= its share."""
    return whole_free if pod.share_milli >= SHARE_MILLI_FULL else max_unit >= pod.share_milli


def _runs(pod: TypicalPod, host_count: np.ndarray, cpu_free: np.ndarray | None = None,
          access: np.ndarray | None = None) -> np.ndarray:
    """Whether the node can run the pod at all: enough GPUs that can host it, its CPU free
    (``cpu_free``, when known) and a GPU model it accepts (``access``, when it names some)."""
    runs = host_count >= pod.gpu_count
    if cpu_free is not None and pod.cpu_milli:
        runs = runs & (cpu_free >= pod.cpu_milli)
    if access is not None:
        runs = runs & access
    return runs


def model_access(pod: TypicalPod, snapshot: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray | None:
    """Which of ``nodes`` have a GPU model the pod accepts; None when it accepts any."""
    if not pod.gpu_models:
        return None
    models = snapshot.models
    ok = np.array([bool(key) and accepts_model(pod.gpu_models, key, family)
                   for key, family in zip(models.keys, models.families, strict=True)], dtype=np.bool_)
    return ok[snapshot.model_id.take(nodes)]


def fragmentation(free: np.ndarray, max_unit: np.ndarray, whole_free: np.ndarray,
                  pods: Iterable[TypicalPod], cpu_free: np.ndarray | None = None,
                  access: Mapping[TypicalPod, np.ndarray | None] | None = None) -> np.ndarray:
    """F per node (rows), in milli-GPU x 1000: sum over typical pods m of weight_milli(m) x F(m),
    an exact integer (as float64), where

    - F(m) = all free capacity when m cannot run on the node at all (too few GPUs can host it,
      too little CPU in ``cpu_free``, or a GPU model it does not accept, ``access[m]``);
    - else the free capacity of the GPUs that cannot host m (a whole-GPU pod needs a free whole
      GPU; a sharing pod a unit with share >= its share, ``max_unit``).
    """
    free_f = np.asarray(free, dtype=np.float64)
    ones = np.ones(free_f.shape[1])
    total = free_f @ ones  # row sums as a matrix-vector product: far faster than sum(axis=1)
    result = np.zeros(len(free_f))
    for pod in pods:
        hosts = _hosts(pod, max_unit, whole_free)
        runs = _runs(pod, row_count(hosts), cpu_free, (access or {}).get(pod))
        result += pod.weight_milli * np.where(runs, total - (free_f * hosts) @ ones, total)
    return result


class FragmentationGradient(ScorePlugin):
    """raw = F_before - F_after (milli-GPU, rounded): how much the placement lowers the node's
    fragmentation (``fragmentation`` / 1000), the CPU the request takes included, minus the
    share a single-GPU unit gives beyond the request's (a 500 MPS slot for 250 strands 250).

    normalized = 100 x (raw - min) // (max - min) over the feasible nodes (100 everywhere when
    they all tie). FGD's own squash, floor(100 x sigmoid(raw / 1000)), maps the usual gradients
    (tens of milli-GPU) onto 48..52, so after weighting it hardly moved a profile's ranking;
    the spread keeps the plugin's say whatever the gradients' scale.

    The placement is evaluated on the GPU the assignment would choose (best fit), not on every
    GPU as the reference simulator does; the trace replay's ``fgd`` policy is exhaustive.

    Example, typical pods only "250 milli x 1, weight 1": a weighted-MPS GPU with 200 free and
    one with 1000 free; placing 250 on the full one: F_before = 200 (the 200 GPU cannot host
    250), F_after = 200 -> raw 0. A node with 300 free on one GPU: placing 250 leaves 50, which
    cannot host 250 and the node then hosts nothing: F_before 0, F_after 50 -> raw -50. Over
    those two nodes: 100 x (0 + 50) // 50 = 100 and 0.
    """

    NAME = "FragmentationGradient"

    def __init__(self, typical_pods: Iterable[Mapping[str, Any]] = DEFAULT_TYPICAL_PODS) -> None:
        pods = [(int(p["share_milli"]), int(p.get("gpu_count", 1)), float(p["weight"]),
                 int(p.get("cpu_milli", 0)), tuple(p.get("gpu_models", ()))) for p in typical_pods]
        total = sum(weight for _, _, weight, _, _ in pods)
        if not pods or total <= 0:
            raise ValueError("FragmentationGradient needs typical pods with a positive total weight")
        # Weights as each class's share of the total, in thousandths.
        self.pods = tuple(TypicalPod(share, count, round(1000 * weight / total), cpu, models)
                          for share, count, weight, cpu, models in pods)

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        snapshot = state.snapshot
        need = state.need
        free = snapshot.gpu_free_milli.take(nodes, axis=0)
        max_unit = snapshot.gpu_max_unit_milli.take(nodes, axis=0)
        whole = snapshot.gpu_whole_free.take(nodes, axis=0)
        cpu = snapshot.cpu_free_milli.take(nodes)
        access = {pod: model_access(pod, snapshot, nodes) for pod in self.pods}
        cpu_after = cpu - state.request.cpu_milli
        if need.multi_gpu:
            before = fragmentation(free, max_unit, whole, self.pods, cpu, access)
            ok = whole & (snapshot.gpu_memory_mib.take(nodes, axis=0) >= need.memory_per_gpu_mib)
            taken = ok & (np.cumsum(ok, axis=1) <= need.gpu_count)  # the lowest free indexes
            after = fragmentation(np.where(taken, 0, free), np.where(taken, 0, max_unit), whole & ~taken, self.pods,
                                  cpu_after, access)
            return np.rint((before - after) / 1000).astype(np.int64)
        return self._single_gpu_gradient(state, nodes, (free, max_unit, whole), (cpu, cpu_after), access)

    def _single_gpu_gradient(self, state: CycleState, nodes: np.ndarray,
                             gpus_free: tuple[np.ndarray, np.ndarray, np.ndarray],
                             cpus: tuple[np.ndarray, np.ndarray],
                             access: Mapping[TypicalPod, np.ndarray | None]) -> np.ndarray:
        """F_before - F_after when one GPU per node changes: the after state is the before state
        corrected by that GPU's change, so no second pass over every GPU is needed."""
        snapshot = state.snapshot
        need = state.need
        free, max_unit, whole = gpus_free
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
        cpu, cpu_after = cpus
        ones = np.ones(free_f.shape[1])
        total = free_f @ ones
        raw = np.zeros(len(nodes))
        for pod in self.pods:
            hosts = _hosts(pod, max_unit, whole)
            hosted = (free_f * hosts) @ ones
            count = row_count(hosts)
            before = np.where(_runs(pod, count, cpu, access[pod]), total - hosted, total)
            old_host = hosts[rows, cols]
            # A GPU that took a placement is never a free whole GPU afterwards.
            new_host = np.zeros(len(rows), dtype=np.bool_) if pod.share_milli >= SHARE_MILLI_FULL \
                else new_max >= pod.share_milli
            total_after = total[rows] - old_free + new_free
            hosted_after = hosted[rows] - old_free * old_host + new_free * new_host
            count_after = count[rows] - old_host + new_host
            after = before.copy()
            node_access = access[pod]
            runs_after = _runs(pod, count_after, cpu_after[rows], None if node_access is None else node_access[rows])
            after[rows] = np.where(runs_after, total_after - hosted_after, total_after)
            raw += pod.weight_milli * (before - after)
        # A unit larger than the request's share (a 500 MPS slot for 250) strands the excess as
        # surely as a sliver left free: FGD's trace never over-allocates, a fixed-slot node does.
        total_weight = sum(pod.weight_milli for pod in self.pods)
        raw[rows] -= total_weight * np.maximum(unit - need.share_milli, 0)
        return np.rint(raw / 1000).astype(np.int64)

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        if not len(raw):
            return raw
        low, high = int(raw.min()), int(raw.max())
        if high == low:
            return np.full(len(raw), 100, dtype=np.int64)
        return 100 * (raw - low) // (high - low)
