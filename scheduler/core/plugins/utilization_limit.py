"""Filter UtilizationLimit: the node's measured GPU utilization is below a threshold."""
from __future__ import annotations

import numpy as np

from scheduler.core.framework import CycleState, FilterPlugin


class UtilizationLimit(FilterPlugin):
    """Pass iff the node's mean measured GPU utilization < ``max_pct`` (default 90).

    The mean is over GPUs that have a sample; a node without samples counts as 0 % (seed 004:
    a node without metrics counts its allocatable GPUs as idle). Example: GPUs at 95, 90, 85,
    90 -> 360 / 4 = 90 >= 90 -> 1 "utilization >= 90%". A CPU-only request passes.
    """

    NAME = "UtilizationLimit"

    def __init__(self, max_pct: float = 90.0) -> None:
        self.max_pct = float(max_pct)

    @property
    def reasons(self) -> tuple[str, ...]:
        return (f"utilization >= {self.max_pct:g}%",)

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        if state.need.cpu_only:  # a pod without GPUs does not care how busy they are
            return np.zeros(len(nodes), dtype=np.int64)
        return (state.snapshot.util_pct.take(nodes) >= self.max_pct).astype(np.int64)

    def explain(self, state: CycleState, node: int, code: int) -> str:
        return f"mean GPU utilization {float(state.snapshot.util_pct[node]):.0f}% >= {self.max_pct:g}%"
