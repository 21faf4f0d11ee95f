"""Score WorkloadAffinity: how well the node's GPU matches the GPU the workload prefers."""
from __future__ import annotations

import numpy as np

from nodes.catalog import CATALOG
from scheduler.core.framework import CycleState, ScorePlugin
from scheduler.core.types import gpu_family


def reference_tflops(family: str) -> float:
    """FP16 TFLOPS of the first catalog model of ``family`` (0 when the catalog has none)."""
    for key, model in CATALOG.items():
        if gpu_family(key).casefold() == family.casefold():
            return model.fp16_tflops
    return 0.0


class WorkloadAffinity(ScorePlugin):
    """raw = 100 when the node's GPU family is the classification's preferred GPU; otherwise
    50 x min(t, t_pref) // max(t, t_pref), where t are FP16 TFLOPS (a GPU of similar power is a
    better substitute than a much weaker or much stronger one). Already 0..100.

    Preferred A100 (312 TFLOPS): an A100-SXM4-80GB node 100; an H100 (989) 50 x 312 // 989 = 15;
    an L4 (121) 50 x 121 // 312 = 19.
    """

    NAME = "WorkloadAffinity"

    def _table(self, state: CycleState) -> np.ndarray:
        """Raw score per model id (cached on the snapshot per preferred GPU)."""
        preferred = state.need.classification.preferred_gpu
        key = (self.NAME, preferred)
        cache = state.snapshot.static_cache
        if key not in cache:
            cache[key] = self._build_table(state, preferred)
        return cache[key]  # type: ignore[return-value]

    def _build_table(self, state: CycleState, preferred: str) -> np.ndarray:
        models = state.snapshot.models
        t_pref = reference_tflops(preferred)
        table = np.zeros(len(models.keys), dtype=np.int64)
        for model_id, (family, tflops) in enumerate(zip(models.families, models.fp16_tflops, strict=True)):
            if not family:
                continue
            if family.casefold() == preferred.casefold():
                table[model_id] = 100
            elif t_pref > 0 and tflops > 0:
                table[model_id] = int(50 * min(tflops, t_pref) // max(tflops, t_pref))
        return table

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        return self._table(state).take(state.snapshot.model_id.take(nodes))
