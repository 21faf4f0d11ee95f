"""Filter GangFit: a tensor-parallel replica's GPUs all on one node."""
from __future__ import annotations

import numpy as np

from scheduler.core.framework import CycleState, FilterPlugin


class GangFit(FilterPlugin):
    """For ``gpu_count`` g > 1: pass iff the node has at least g GPUs, g of them free and whole.

    1 "node has fewer GPUs than the gang": ``gpu_count(node) < g`` (it could never fit);
    2 "not enough free GPUs for the gang": ``free whole GPUs < g``.
    A single-GPU request always passes (the other filters judge it).
    """

    NAME = "GangFit"
    REASONS = ("node has fewer GPUs than the gang", "not enough free GPUs for the gang")

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        gang = state.need.gpu_count
        if gang == 1:
            return np.zeros(len(nodes), dtype=np.int64)
        snapshot = state.snapshot
        too_small = snapshot.gpu_count.take(nodes) < gang
        return np.where(too_small, 1, np.where(snapshot.whole_free.take(nodes) < gang, 2, 0))

    def explain(self, state: CycleState, node: int, code: int) -> str:
        snapshot = state.snapshot
        gang = state.need.gpu_count
        if code == 1:
            return f"needs {gang} GPUs on one node; the node has {int(snapshot.gpu_count[node])}"
        free = int(snapshot.whole_free[node])
        return f"needs {gang} free whole GPUs; {free} {'is' if free == 1 else 'are'} free"
