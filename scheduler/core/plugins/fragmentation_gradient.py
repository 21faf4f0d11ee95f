"""Score FragmentationGradient (FGD, Weng et al., ATC'23): avoid placements that fragment GPUs.

The measure is ``scheduler.core.fragmentation``'s (docs/design.md sections 6 and 13), bounded by
the CPU a node has left (gpuplane's measure; ``cpu_bounded=False`` gives FGD's own), read from the
snapshot's columns by ``scheduler.core.fragmentation_columns``, which keeps every node's F
between cycles and recomputes only the nodes that changed. A placement's gradient is evaluated
on the GPU its assignment would take (``CycleState.gpus``: best fit, or the GPU a PreScore plugin
such as SharingPlan preferred); on seed 42 of the Alibaba trace that scores exactly as evaluating
every GPU and keeping the best (96.06 either way), at a fraction of the cost.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.fit import KIND_MIG, KIND_WEIGHTED, FitTable
from scheduler.core.fragmentation_columns import NodeFragmentation, TypicalPods
from scheduler.core.framework import CycleState, ScorePlugin
from scheduler.core.plugins.capability_match import accepts_model

# When the observed workload is not known (``plugin_args`` give it): the classification's shares.
DEFAULT_TYPICAL_PODS: tuple[dict[str, float], ...] = (
    {"share_milli": 250, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 500, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 1000, "gpu_count": 1, "weight": 0.3},
    {"share_milli": 1000, "gpu_count": 2, "weight": 0.1},
)

_SQUASH = 100.0  # FGD's score: 100 x sigmoid(gradient / 1000 milli-GPU), truncated
# A uniform slot's share by R (1000 // R), looked up rather than divided per node.
_SLOT_SHARE = np.array([SHARE_MILLI_FULL] + [SHARE_MILLI_FULL // r for r in range(1, 65)], dtype=np.int64)


def _squash(raw: np.ndarray) -> np.ndarray:
    exponent = np.clip(-np.asarray(raw, dtype=np.float64) / 1000.0, -700.0, 700.0)  # e^710 overflows
    return (_SQUASH / (1.0 + np.exp(exponent))).astype(np.int64)


# Gradients this far from 0 score 0 or 100 (100 x sigmoid(+-12) truncates to 99 / 0 only
# beyond); within, a table read replaces an exponential per node.
_SQUASH_REACH = 12000
_SQUASH_TABLE = _squash(np.arange(-_SQUASH_REACH, _SQUASH_REACH + 1))


def squash(raw: np.ndarray) -> np.ndarray:
    """FGD's score of gradients in milli-GPU: floor(100 / (1 + e^(-raw / 1000))), 0..100."""
    raw = np.asarray(raw, dtype=np.int64)
    inside = _SQUASH_TABLE.take(np.clip(raw, -_SQUASH_REACH, _SQUASH_REACH) + _SQUASH_REACH)
    if len(raw) and (np.abs(raw) > _SQUASH_REACH).any():
        return np.where(np.abs(raw) > _SQUASH_REACH, _squash(raw), inside)
    return inside


class FragmentationGradient(ScorePlugin):
    """raw = F_before - F_after in milli-GPU (rounded): how much the placement lowers the node's
    fragmentation, i.e. the GPU capacity that typical pods of the workload could no longer use
    (weighted by their share of it; the CPU the request takes is counted, and a node's hosting
    GPUs count only as far as its CPU left can feed their pods). A unit larger than the request's
    share (a 500 MPS slot for 250) strands the excess: it is subtracted.

    normalized = FGD's squash, floor(100 x sigmoid(raw / 1000)): 0 -> 50, +200 -> 54, -500 -> 37,
    -2000 -> 11. Coarse on purpose: among equal scores the node order decides (the replay of the
    Alibaba trace found finer orders pack worse; docs/packing.md).

    Example, typical pods only "250 milli x 1, weight 1", no CPU: a weighted-MPS GPU with 200 free
    and one with 1000 free; 250 onto the full one: F_before = 200 (the 200 GPU cannot host 250),
    F_after = 200 -> raw 0 -> 50. A node with 300 free on one GPU: 250 leaves 50, which hosts
    nothing: F_before 0, F_after 50 -> raw -50 -> 48.
    """

    NAME = "FragmentationGradient"

    def __init__(self, typical_pods: Iterable[Mapping[str, Any]] = DEFAULT_TYPICAL_PODS,
                 cpu_bounded: bool = True) -> None:
        try:
            self.table = TypicalPods.build(typical_pods, cpu_bounded=bool(cpu_bounded))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"FragmentationGradient typical_pods: {error}") from None

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        snapshot = state.snapshot
        need = state.need
        frag = NodeFragmentation.current(self.table, snapshot, accepts_model)
        before = frag.frag.take(nodes)
        cpu = state.request.cpu_milli
        if need.cpu_only or need.multi_gpu:
            after = frag.after_whole_gpus(snapshot, nodes, need.gpu_count, cpu)
            return np.rint(before - after).astype(np.int64)
        fit = state.fit(nodes)
        if not fit.fits.all():  # feasible nodes all fit; a caller may score others: 0 for them
            raw = np.zeros(len(nodes), dtype=np.int64)
            rows = np.flatnonzero(fit.fits)
            if len(rows):
                raw[rows] = self.score(state, nodes.take(rows))
            return raw
        # A whole GPU goes from 1000 free (hosting every class) to nothing; other units are read
        # from the GPU the assignment would take.
        old_free = np.full(len(nodes), SHARE_MILLI_FULL, dtype=np.int32)
        old_unit = old_free.copy()
        new_free = np.zeros(len(nodes), dtype=np.int32)
        new_unit = new_free.copy()
        gpus = state.gpus(nodes)
        at = np.flatnonzero(gpus >= 0)
        if len(at):
            ids = nodes.take(at)
            flat = ids * snapshot.gpu_slots + gpus.take(at)
            old_free[at] = free = snapshot.gpu_free_milli.ravel().take(flat)
            old_unit[at] = largest = snapshot.gpu_max_unit_milli.ravel().take(flat)
            new_free[at], new_unit[at] = self._gpu_after(state, fit, at, (ids, flat), (free, largest))
        after = frag.after_one_gpu(snapshot, nodes, (old_free, old_unit), (new_free, new_unit), cpu)
        # A unit larger than the share strands the excess as surely as a sliver left free.
        excess = np.maximum(fit.unit_share_milli - need.share_milli, 0)
        return np.rint(before - after - excess).astype(np.int64)

    @staticmethod
    def _gpu_after(state: CycleState, fit: FitTable, rows: np.ndarray, where: tuple[np.ndarray, np.ndarray],
                   old: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Usable free milli and largest unit of the GPU each placement takes (``where``: node ids
        and the GPU's index in the snapshot's raveled per-GPU columns; ``old``: the two before),
        once it holds its unit; ``rows`` are the placements' positions in ``fit`` (never whole GPUs)."""
        snapshot = state.snapshot
        ids, flat = where
        old_free, old_unit = old
        kind, unit = fit.kind.take(rows), fit.unit_share_milli.take(rows)
        share_after = snapshot.gpu_free_share_milli.ravel().take(flat) - unit
        new_free = np.where(snapshot.gpu_free_slots.ravel().take(flat) > 1, share_after, 0)
        # The next unit there: what is left of a weighted GPU, at most one slot's share of a
        # uniform one (0 once its slots are gone).
        cap = np.where(kind == KIND_WEIGHTED, SHARE_MILLI_FULL, _SLOT_SHARE.take(snapshot.replicas.take(ids), mode="clip"))
        new_unit = np.minimum(cap, new_free)
        mig = np.flatnonzero(kind == KIND_MIG)
        if len(mig):
            # Its instances stay; the largest free one changes only when the largest was taken.
            new_free[mig] = old_free[mig] - unit[mig]
            new_unit[mig] = np.where(unit[mig] < old_unit[mig], old_unit[mig],
                                     snapshot.gpu_next_unit_milli.ravel().take(flat[mig]))
        return new_free, new_unit

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        return squash(raw)
