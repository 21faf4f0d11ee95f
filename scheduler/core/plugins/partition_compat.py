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

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        fit = state.fit(nodes)
        need = state.need
        # Unit shares are 0..1000: a lookup table of 100 x s // u (0 for "no unit") replaces a
        # per-node integer division, which numpy does slowly.
        units = np.arange(SHARE_MILLI_FULL + 1)
        table = np.minimum(100 * need.share_milli // np.maximum(units, 1), 100)
        table[0] = 0
        raw = table[fit.unit_share_milli]
        mig = fit.kind == KIND_MIG
        if mig.any():
            memory = pick(state.snapshot.offer_memory_mib, fit.nodes, np.maximum(fit.offer, 0)).astype(np.int64)
            by_memory = np.minimum(100 * need.memory_mib // np.maximum(memory, 1), 100)
            if need.min_share(PartitionKind.MIG):
                by_memory = np.maximum(raw, by_memory)
            raw = np.where(mig, by_memory, raw)
        return raw >> (fit.kind == KIND_TIMESLICE)  # halved on time-slicing
