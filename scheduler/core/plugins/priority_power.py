"""Score PriorityPower: HIGH priority favours fast GPUs, LOW favours low-power ones."""
from __future__ import annotations

import numpy as np

from scheduler.core.framework import CycleState, ScorePlugin
from scheduler.core.plugins.power_efficiency import floor_ratio
from scheduler.core.types import Priority


class PriorityPower(ScorePlugin):
    """By the request's priority:

    - HIGH: raw = FP16 TFLOPS; normalized = 100 x raw // max(raw).
      H100 989 -> 100; A100 312 -> 100 x 312 // 989 = 31.
    - LOW: raw = TDP W; normalized = 100 x min(raw) // raw.
      A100 400 W -> 100; H100 700 W -> 100 x 400 // 700 = 57.
    - MEDIUM: raw = normalized = 50 everywhere (no preference; it does not change the order).
    """

    NAME = "PriorityPower"

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        snapshot = state.snapshot
        priority = Priority(state.request.priority)
        if priority == Priority.HIGH:
            return snapshot.fp16_tflops.take(nodes)
        if priority == Priority.LOW:
            return snapshot.tdp_w.take(nodes)
        return np.full(len(nodes), 50, dtype=np.int64)

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        if len(raw) == 0:
            return raw
        priority = Priority(state.request.priority)
        if priority == Priority.HIGH:
            top = int(raw.max())
            return floor_ratio(raw * 100, top) if top > 0 else np.zeros_like(raw)
        if priority == Priority.LOW:
            positive = raw[raw > 0]
            if len(positive) == 0:
                return np.zeros_like(raw)
            low = int(positive.min())
            return np.where(raw > 0, floor_ratio(np.full(len(raw), low * 100), np.maximum(raw, 1)), 0)
        return raw
