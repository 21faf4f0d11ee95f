"""Score BestFit (packing): the node left with the least free GPU capacity scores highest."""
from __future__ import annotations

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.framework import CycleState, ScorePlugin


class BestFit(ScorePlugin):
    """raw = 100 x (C - L) // C, where C = GPUs x 1000 and L = the node's usable free milli-GPU
    minus what the placement takes (its unit share x ``gpu_count``), at least 0. GPU-only form
    of the reference simulator's BestFit (the core tracks no CPU requests).

    8-GPU node with one free GPU, whole-GPU request: L = 1000 - 1000 = 0 -> 100 x 8000 // 8000
    = 100; all eight free: L = 8000 - 1000 = 7000 -> 100 x 1000 // 8000 = 12.
    """

    NAME = "BestFit"

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        snapshot = state.snapshot
        fit = state.fit(nodes)
        capacity = np.maximum(snapshot.gpu_count.take(nodes) * SHARE_MILLI_FULL, 1)
        left = np.maximum(snapshot.free_milli.take(nodes) - fit.charge_milli(state.need), 0)
        return np.clip(100 * (capacity - left) // capacity, 0, 100)
