"""Hardware limits: what a node could never give a request, whatever is free or configured.

Used only to explain a cycle that placed nothing: a node whose largest GPU is smaller than the
request's memory per GPU (or that has fewer GPUs than its gang) is counted under that reason,
whichever filter turned it away first, because no other change (freeing capacity, another
sharing mode, lower utilization) would make it fit. ``HardwareLimits`` speaks the filter
protocol so that the cycle counts and explains these nodes like any other rejection; it is never
part of a profile.
"""
from __future__ import annotations

import numpy as np

from scheduler.core.diagnosis import HARDWARE_GPUS, HARDWARE_MEMORY
from scheduler.core.fit import Need
from scheduler.core.framework import CycleState, FilterPlugin
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.wording import counted, gb

MEMORY = 1  # no GPU (or too few GPUs) of the node has the memory the request needs per GPU
GPUS = 2  # the node has fewer GPUs than the request's gang


def gpu_memory(snapshot: ClusterSnapshot, nodes: np.ndarray | None = None) -> np.ndarray:
    """Memory of each GPU of ``nodes`` (all by default); 0 where a node has no GPU in that slot."""
    rows = slice(None) if nodes is None else nodes
    return np.where(snapshot.gpu_present[rows], snapshot.gpu_memory_mib[rows], 0)


def largest_gpu_mib(snapshot: ClusterSnapshot) -> int:
    """The memory of the cluster's largest GPU (0 for a cluster without GPUs)."""
    memory = gpu_memory(snapshot)
    return int(memory.max()) if memory.size else 0


def most_gpus(snapshot: ClusterSnapshot) -> int:
    """The GPU count of the node with the most GPUs (a gang must fit on one node)."""
    return int(snapshot.gpu_count.max()) if len(snapshot) else 0


def hardware_limits(snapshot: ClusterSnapshot, need: Need, nodes: np.ndarray) -> np.ndarray:
    """Per node of ``nodes``: ``MEMORY``, ``GPUS`` or 0 (its hardware could hold the request)."""
    big_enough = (gpu_memory(snapshot, nodes) >= need.memory_per_gpu_mib).sum(axis=1)
    codes = np.zeros(len(nodes), dtype=np.int64)
    codes[big_enough < need.gpu_count] = MEMORY
    # A node with a big enough GPU but too few GPUs in all lacks GPUs, not memory.
    codes[(big_enough > 0) & (snapshot.gpu_count.take(nodes) < need.gpu_count)] = GPUS
    return codes


class HardwareLimits(FilterPlugin):
    """The explanation pass over the rejected nodes of a cycle that placed nothing."""

    NAME = "HardwareLimits"
    REASONS = (HARDWARE_MEMORY, HARDWARE_GPUS)

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        return hardware_limits(state.snapshot, state.need, nodes)

    def explain(self, state: CycleState, node: int, code: int) -> str:
        need = state.need
        snapshot = state.snapshot
        if code == GPUS:
            return (f"the node has {counted(int(snapshot.gpu_count[node]), 'GPU')}; "
                    f"the replica needs {need.gpu_count} on one node")
        largest = int(gpu_memory(snapshot, np.array([node])).max(initial=0))
        on = f"on each of {need.gpu_count} GPUs" if need.multi_gpu else "on one GPU"
        return f"its largest GPU has {gb(largest)}; the replica needs {gb(need.memory_per_gpu_mib)} {on}"
