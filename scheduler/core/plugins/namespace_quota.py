"""Filter NamespaceQuota: the placement stays within its namespace's GPU quota."""
from __future__ import annotations

import numpy as np

from scheduler.core.framework import SUCCESS, Code, CycleState, FilterPlugin, PreFilterPlugin, Status
from scheduler.core.wording import gb, gpus


class NamespaceQuota(PreFilterPlugin, FilterPlugin):
    """Quota values come with the request (``PlacementRequest.quota``); None limits are unlimited.

    PreFilter: ``memory_used + memory > memory_limit`` rejects the request on every node
    ("namespace memory quota exceeded"); the charge does not depend on the node.
    Filter: the compute share charged depends on the unit a node would give (a whole GPU 1000,
    an MPS slot of R=4 250, a 3g MIG instance 428, x ``gpu_count``), so a node passes iff
    ``gpu_milli_used + charge <= gpu_milli_limit``. Example: limit 2000, used 1500: an MPS R=2
    slot (500) passes, a whole GPU (1000) fails with 1 "namespace GPU quota exceeded".
    """

    NAME = "NamespaceQuota"
    REASONS = ("namespace GPU quota exceeded",)

    def pre_filter(self, state: CycleState) -> Status:
        quota = state.request.quota
        if quota is not None and quota.memory_mib_limit is not None:
            after = quota.memory_mib_used + state.need.memory_mib
            if after > quota.memory_mib_limit:
                return Status(
                    Code.UNSCHEDULABLE,
                    "namespace memory quota exceeded",
                    f"{state.request.namespace}: {gb(after)} would exceed the limit of {gb(quota.memory_mib_limit)}",
                    self.NAME,
                )
        return SUCCESS

    def _left(self, state: CycleState) -> int | None:
        quota = state.request.quota
        if quota is None or quota.gpu_milli_limit is None:
            return None
        return quota.gpu_milli_limit - quota.gpu_milli_used

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        left = self._left(state)
        if left is None:
            return np.zeros(len(nodes), dtype=np.int64)
        fit = state.fit(nodes)
        # Nodes where nothing fits are GPUMemoryFit's to reject; charge them the bare request.
        charge = np.where(fit.fits, fit.charge_milli(state.need), state.need.share_milli * state.need.gpu_count)
        return (charge > left).astype(np.int64)

    def explain(self, state: CycleState, node: int, code: int) -> str:
        quota = state.request.quota
        fit = state.fit(np.array([node]))
        charge = int(fit.charge_milli(state.need)[0]) if fit.fits[0] else state.need.share_milli
        limit = quota.gpu_milli_limit if quota and quota.gpu_milli_limit is not None else 0
        used = quota.gpu_milli_used if quota else 0
        return (
            f"{state.request.namespace}: {gpus(used)} in use + {gpus(charge)} here would exceed "
            f"the limit of {gpus(limit)}"
        )
