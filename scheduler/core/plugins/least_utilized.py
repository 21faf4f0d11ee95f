"""Score LeastUtilized: less loaded nodes score higher (mixed load spreads out, seed scenario 3)."""
from __future__ import annotations

import numpy as np

from scheduler.core.framework import CycleState, ScorePlugin


class LeastUtilized(ScorePlugin):
    """raw = floor(100 - load), clamped to 0..100, where load is the node's mean over its GPUs
    of max(measured utilization %, allocated share %). Counting the allocated share makes
    placements made since the last telemetry sample count, so a burst of decisions does not
    pile onto the node that looked idle.

    A100 GPUs at 60 % and 40 % measured, nothing allocated: load (60 + 40) / 2 = 50 -> 50.
    Same node with 50 % allocated on the second GPU: (60 + max(40, 50)) / 2 = 55 -> 45.
    """

    NAME = "LeastUtilized"

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        # The snapshot keeps floor(100 - load) clamped to 0..100 per node (``unloaded_pct``).
        return state.snapshot.unloaded_pct.take(nodes)
