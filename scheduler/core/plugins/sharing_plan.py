"""PreScore + Score SharingPlan: step weighted shares towards the workload's planned GPU contents.

The plan (``scheduler.core.packing_plan``) is how the observed workload's sharing pods would
share GPUs if packed offline by best-fit decreasing: GPU contents such as 470+470, 650+320,
810 alone. A weighted share of ``s`` milli onto a GPU already holding ``u`` milli is *on plan*
when some planned content holds shares summing to ``u`` plus one of ``s``: the GPU is on its way
to a planned content, so a 320 goes beside a 650 (30 left) or opens a GPU rather than sitting
beside a 470 (210 left that only rare tiny pods fill). On the Alibaba trace this cuts the badly
paired GPUs by half (BENCHMARKS.md, "Trace replay").
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.fit import KIND_WEIGHTED
from scheduler.core.framework import CycleState, PreScorePlugin, ScorePlugin
from scheduler.core.packing_plan import SharingPlan as Plan


class SharingPlan(PreScorePlugin, ScorePlugin):
    """PreScore: on each weighted-MPS node, prefer the GPUs where the request's share is a step
    of the plan (``CycleState.prefer_gpus``; among them the assignment still takes the one with
    the least free share), so FragmentationGradient and the assignment see the same GPU.

    raw = 1 when the placement keeps to the plan, else 0; normalized = 100 x raw. Keeping to the
    plan: its share is a planned step on the GPU it would take; or the plan has no say (a whole
    GPU, a fixed-size unit: MPS slot, MIG instance, time-slice replica; a share the plan does not
    hold; no plan). Given more weight than the other scores together, it ranks on-plan nodes
    first whenever there are any, as the trace replay's rule does.

    Example, plan [[650, 320]]: a 320 request; GPU A holds 650 (free 350), GPU B holds 470 (free
    530), GPU C is empty. Steps for 320: used 0 (start a 650+320 GPU) and used 650 -> A and C are
    on plan (raw 1), B is not (raw 0); of A and C the assignment takes A (least free share).
    """

    NAME = "SharingPlan"

    def __init__(self, patterns: Iterable[Sequence[int]] = ()) -> None:
        contents = [[int(share) for share in pattern] for pattern in patterns]
        if any(not 0 < share <= SHARE_MILLI_FULL for pattern in contents for share in pattern):
            raise ValueError(f"SharingPlan patterns hold shares of 1..{SHARE_MILLI_FULL} milli")
        self.plan = Plan.from_patterns(contents)

    def _applies(self, state: CycleState) -> bool:
        need = state.need
        return need.gpu_count == 1 and need.share_milli < SHARE_MILLI_FULL and need.share_milli in self.plan.steps

    def pre_score(self, state: CycleState, nodes: np.ndarray) -> None:
        if not self._applies(state):
            return
        weighted = np.flatnonzero(state.fit(nodes).kind == KIND_WEIGHTED)
        if not len(weighted):
            return
        ids = nodes.take(weighted)
        used = SHARE_MILLI_FULL - state.snapshot.gpu_free_share_milli.take(ids, axis=0)
        state.prefer_gpus(ids, self.plan.on_plan(state.need.share_milli, used))
        state.data[self.NAME] = ids

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        raw = np.ones(len(nodes), dtype=np.int64)
        if not self._applies(state):
            return raw
        fit = state.fit(nodes)
        weighted = np.flatnonzero(fit.kind == KIND_WEIGHTED)
        if not len(weighted):
            return raw
        ids = nodes.take(weighted)
        gpus = state.gpus(nodes).take(weighted)
        used = SHARE_MILLI_FULL - state.snapshot.gpu_free_share_milli[ids, np.maximum(gpus, 0)]
        raw[weighted] = self.plan.on_plan(state.need.share_milli, used) & (gpus >= 0)
        return raw

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        return 100 * raw
