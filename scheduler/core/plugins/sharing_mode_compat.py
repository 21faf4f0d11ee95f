"""Filter SharingModeCompat: the node's sharing mode can serve the request, within NVIDIA's limits."""
from __future__ import annotations

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode
from scheduler.core.fit import WEIGHTED_GANG
from scheduler.core.framework import SUCCESS, Code, CycleState, FilterPlugin, PreFilterPlugin, Status
from scheduler.core.node_columns import MODE_ID, MODES
from scheduler.core.types import MODE_KINDS, SharingRequest

_MPS = MODE_ID[SharingMode.MPS]
_WEIGHTED = MODE_ID[SharingMode.MPS_WEIGHTED]
_TIMESLICE = MODE_ID[SharingMode.TIMESLICE]


class SharingModeCompat(PreFilterPlugin, FilterPlugin):
    """Pass iff the node's mode offers a partition kind the request accepts and NVIDIA's limits
    allow it (docs/design.md section 4):

    1 "sharing mode not requested": the mode offers none of the accepted kinds
      (an explicit ``sharing: mps`` never lands on a time-sliced node).
    2 "multi-GPU requests need whole GPUs": ``gpu_count`` > 1 on an mps, timeslice or (unless
      the request asks for mps-weighted) mps-weighted node: the device plugin refuses more than
      one shared replica per request; a gang that asks for mps-weighted is given untouched GPUs
      of such a node, 100 % of each (``scheduler.core.fit``).
    3 "MPS cannot run on MIG GPUs": an mps / mps-weighted node with a MIG-enabled GPU.
    4 "MPS clients exceed the GPU's limit": R > 48 clients (16 before compute capability 7.5).
    5 "MPS share too small": uniform MPS gives each client 1000 // R milli, so a request of
      share s needs ``1000 // R >= s``, i.e. R <= 1000 // s (50 % -> R <= 2, 25 % -> R <= 4).
    6 "time-slice share too small": the same rule for a time-slice replica's nominal share, only
      when the request demands compute of a replica (a stated share or an exclusive demand;
      time-slicing is otherwise sized by memory, ``scheduler.core.sizing``).

    PreFilter refuses outright a multi-GPU request that explicitly asks for a shared mode other
    than mps-weighted. A CPU-only request (no GPU) passes every node.
    """

    NAME = "SharingModeCompat"
    REASONS = (
        "sharing mode not requested",
        "multi-GPU requests need whole GPUs",
        "MPS cannot run on MIG GPUs",
        "MPS clients exceed the GPU's limit",
        "MPS share too small",
        "time-slice share too small",
    )

    def pre_filter(self, state: CycleState) -> Status:
        sharing = SharingRequest(state.request.sharing)
        gang_ok = (SharingRequest.AUTO, SharingRequest.EXCLUSIVE, SharingRequest.MPS_WEIGHTED)
        if state.need.multi_gpu and sharing not in gang_ok:
            return Status(
                Code.UNSCHEDULABLE,
                f"{sharing} requests take exactly one GPU",
                f"gpu_count {state.need.gpu_count} needs whole GPUs; {sharing} shares one GPU",
                self.NAME,
            )
        need = state.need
        key = (self.NAME, need.kinds, need.sizing.min_share_milli, need.gpu_count)
        cache = state.snapshot.static_cache
        if key not in cache:
            cache[key] = self._codes_by_group(state)
        state.data[self.NAME] = cache[key]
        return SUCCESS

    def _codes_by_group(self, state: CycleState) -> np.ndarray:
        """The code of every node group (mode, R, model and MIG flag are group properties)."""
        snapshot = state.snapshot
        need = state.need
        kinds = need.kinds
        if need.cpu_only:
            return np.zeros(len(snapshot.group_mode_id), dtype=np.int64)
        offers = np.array([bool(MODE_KINDS[mode] & kinds) for mode in MODES])
        whole = np.array([PartitionKind.EXCLUSIVE in MODE_KINDS[mode] & kinds
                          or (mode == SharingMode.MPS_WEIGHTED and kinds == WEIGHTED_GANG) for mode in MODES])
        mode = snapshot.group_mode_id
        replicas = np.maximum(snapshot.group_replicas, 1)
        slot_share = SHARE_MILLI_FULL // replicas
        is_mps = (mode == _MPS) | (mode == _WEIGHTED)
        code = np.zeros(len(mode), dtype=np.int64)
        # Assigned from the least to the most important reason: the last write wins.
        code[(mode == _TIMESLICE) & (slot_share < need.min_share(PartitionKind.TIMESLICE))] = 6
        code[(mode == _MPS) & (slot_share < need.min_share(PartitionKind.MPS))] = 5
        code[is_mps & (replicas > snapshot.models.mps_max_clients[snapshot.group_model_id])] = 4
        code[is_mps & snapshot.group_has_mig_gpu] = 3
        if need.multi_gpu:
            code[~whole[mode]] = 2
        code[~offers[mode]] = 1
        return code

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        return state.data[self.NAME].take(state.snapshot.group_id.take(nodes))

    def explain(self, state: CycleState, node: int, code: int) -> str:
        snapshot = state.snapshot
        replicas = int(snapshot.replicas[node])
        mode = MODES[int(snapshot.mode_id[node])]
        if code == 1:
            return f"node is {mode}; the request accepts {', '.join(sorted(state.need.kinds))}"
        if code == 4:
            limit = int(snapshot.models.mps_max_clients[snapshot.model_id[node]])
            return f"R={replicas} MPS clients per GPU exceeds this GPU's limit of {limit}"
        if code in (5, 6):
            what = "MPS" if code == 5 else "time-slicing"
            who = "client" if code == 5 else "replica"
            share = state.need.min_share(PartitionKind.MPS if code == 5 else PartitionKind.TIMESLICE)
            return (
                f"{what} with R={replicas} gives each {who} {SHARE_MILLI_FULL // replicas / 10:g}%; "
                f"a {share / 10:g}% request needs R <= {SHARE_MILLI_FULL // share}"
            )
        return self.reasons[code - 1]
