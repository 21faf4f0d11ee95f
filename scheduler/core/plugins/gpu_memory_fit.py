"""Filter GPUMemoryFit: some free GPU or partition covers the request's memory and share."""
from __future__ import annotations

import numpy as np

from scheduler.core.fit import NO_MEMORY, NO_SHARE
from scheduler.core.framework import CycleState, FilterPlugin
from scheduler.core.node_columns import MODES
from scheduler.core.types import MODE_KINDS
from scheduler.core.wording import gb, percent


class GPUMemoryFit(FilterPlugin):
    """Pass iff a free unit of an accepted kind has share >= what the request demands of that
    kind (``scheduler.core.sizing``) and memory >= its memory (per GPU for a multi-GPU request);
    see ``scheduler.core.fit`` for the units.

    Example: a 48 GiB (49152 MiB) request on an A100-40GB (40960 MiB) node: 40960 < 49152 ->
    1 "insufficient GPU memory". A 25 % request on a weighted-MPS GPU holding 50 % + 25 %: free
    share 1000 - 750 = 250 >= 250 -> passes; with a third 25 % there: 0 < 250 -> 2 "insufficient
    free GPU share". Every GPU / slot / instance held -> 3 "no free GPU or partition".
    """

    NAME = "GPUMemoryFit"
    REASONS = ("insufficient GPU memory", "insufficient free GPU share", "no free GPU or partition")

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        return state.fit(nodes).code

    def explain(self, state: CycleState, node: int, code: int) -> str:
        need = state.need
        if code == NO_MEMORY:
            per_gpu = f" on each of {need.gpu_count} GPUs" if need.multi_gpu else ""
            return f"needs {gb(need.memory_per_gpu_mib)}{per_gpu}; no free unit of the node has that much"
        if code == NO_SHARE:
            # The least share any unit this node's mode offers would have to cover.
            mode = MODES[int(state.snapshot.mode_id[node])]
            share = min((need.min_share(kind) for kind in MODE_KINDS[mode] & need.kinds), default=need.share_milli)
            return f"needs {percent(share)} of a GPU; no free unit of the node has that much"
        return self.reasons[code - 1]
