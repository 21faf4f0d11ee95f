"""Score PartitionCompat: the unit the node would give is the right size for the request."""
from __future__ import annotations

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind
from scheduler.core.fit import KIND_MIG, KIND_TIMESLICE
from scheduler.core.framework import CycleState, ScorePlugin
from scheduler.core.packed_rows import pick


class PartitionCompat(ScorePlugin):
    """raw = 100 x s // u, where s is the request's share and u the share of the smallest unit
    the node would give (``scheduler.core.fit``); halved on time-slicing, which isolates neither
    memory nor faults. A MIG instance is sized by memory (``scheduler.core.sizing``), so its raw
    is 100 x m // M, m the request's memory and M the instance's (the larger of the two ratios
    when a share was stated). Already 0..100 (units cover the request).

    A 50 % request: MPS R=2 slot (500) 100 x 500 // 500 = 100; weighted share 100; whole GPU
    100 x 500 // 1000 = 50; time-slice R=2 (500) 100 // 2 = 50. 8 GB (8192 MiB) on an A100-40GB
    4g.20gb instance (20480 MiB): 100 x 8192 // 20480 = 40; on a 1g.10gb (10240 MiB): 80.
    """

    NAME = "PartitionCompat"

    def __init__(self) -> None:
        super().__init__()
        self._tables: dict[int, np.ndarray] = {}

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        fit = state.fit(nodes)
        need = state.need
        raw = self._table(need.share_milli).take(fit.unit_share_milli)
        kind = fit.kind
        mig = np.flatnonzero(kind == KIND_MIG)
        if len(mig):
            # MIG units only: a gather and a division over those rows, not over every node.
            memory = pick(state.snapshot.offer_memory_mib, fit.nodes.take(mig), np.maximum(fit.offer.take(mig), 0))
            by_memory = np.minimum(100 * need.memory_mib // np.maximum(memory.astype(np.int64), 1), 100)
            if need.min_share(PartitionKind.MIG):
                by_memory = np.maximum(raw.take(mig), by_memory)
            raw[mig] = by_memory
        timeslice = kind == KIND_TIMESLICE
        return raw >> timeslice if timeslice.any() else raw  # halved on time-slicing

    def _table(self, share_milli: int) -> np.ndarray:
        """100 x s // u for every unit share u of 0..1000 (0 for "no unit"): a lookup replaces a
        per-node integer division, which numpy does slowly. Kept per share (a few classes)."""
        table = self._tables.get(share_milli)
        if table is None:
            units = np.arange(SHARE_MILLI_FULL + 1)
            table = np.minimum(100 * share_milli // np.maximum(units, 1), 100)
            table[0] = 0
            if len(self._tables) < 64:
                self._tables[share_milli] = table
        return table
