"""Score PowerEfficiency: GPUs that do more work per watt score higher."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from scheduler.core.framework import CycleState, ScorePlugin


class PowerEfficiency(ScorePlugin):
    """raw = 1000 x FP16 dense TFLOPS / TDP W (milli-TFLOPS per watt, integer);
    normalized = 100 x raw // max(raw over the feasible nodes) (all 0 when the max is 0).

    H100-SXM5-80GB: 1000 x 989 / 700 = 1412; A100-SXM4-40GB: 1000 x 312 / 400 = 780.
    With both feasible: H100 100 x 1412 // 1412 = 100, A100 100 x 780 // 1412 = 55.

    ``corrections`` (GPU model -> measured / predicted throughput, the feedback's correction
    factors, docs/concepts.md "Feedback") scale the catalog figure: a model that delivers 60 %
    of what its datasheet promises scores 60 % of its catalog efficiency.
    """

    NAME = "PowerEfficiency"

    def __init__(self, corrections: Mapping[str, float] | None = None) -> None:
        self.corrections = {str(k): float(v) for k, v in (corrections or {}).items()}

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        raw = state.snapshot.milli_tflops_per_w.take(nodes)
        if not self.corrections:
            return raw
        keys = state.snapshot.models.keys
        factors = np.array([self.corrections.get(keys[m], 1.0) for m in range(len(keys))], dtype=np.float64)
        return (raw * factors.take(state.snapshot.model_id.take(nodes))).astype(raw.dtype)

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        top = int(raw.max()) if len(raw) else 0
        if top <= 0:
            return np.zeros_like(raw)
        return floor_ratio(raw * 100, top)


def floor_ratio(numerator: np.ndarray, denominator: int | np.ndarray) -> np.ndarray:
    """``numerator // denominator`` for non-negative integers below 2**31 (and a positive
    denominator), through float64: numpy's integer division is several times slower. Exact: the
    quotient's rounding error (2**-53 relative) is far below its distance to the next integer
    from below (at least 1 / denominator)."""
    return (numerator / denominator).astype(np.int64)
