"""Score PartitionCompat: the unit the node would give is the right size for the request."""
from __future__ import annotations

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.fit import KIND_TIMESLICE
from scheduler.core.framework import CycleState, ScorePlugin


class PartitionCompat(ScorePlugin):
    """raw = 100 x s // u, where s is the request's share and u the share of the smallest unit
    the node would give (``scheduler.core.fit``); halved on time-slicing, which isolates neither
    memory nor faults. Already 0..100 (u >= s for every fitting unit).

    A 50 % request: MPS R=2 slot (500) 100 x 500 // 500 = 100; weighted share 100; 4g MIG
    instance (571) 100 x 500 // 571 = 87; whole GPU 100 x 500 // 1000 = 50; time-slice R=2
    (500) 100 // 2 = 50.
    """

    NAME = "PartitionCompat"

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        fit = state.fit(nodes)
        # Unit shares are 0..1000: a lookup table of 100 x s // u (0 for "no unit") replaces a
        # per-node integer division, which numpy does slowly.
        units = np.arange(SHARE_MILLI_FULL + 1)
        table = np.minimum(100 * state.need.share_milli // np.maximum(units, 1), 100)
        table[0] = 0
        raw = table[fit.unit_share_milli]
        return raw >> (fit.kind == KIND_TIMESLICE)  # halved on time-slicing
