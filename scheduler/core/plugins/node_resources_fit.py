"""Filter NodeResourcesFit: the node's free CPU and host memory hold the pod's requests."""
from __future__ import annotations

import numpy as np

from scheduler.core.framework import CycleState, FilterPlugin


class NodeResourcesFit(FilterPlugin):
    """Pass iff ``cpu_milli <= allocatable - requested`` and the same for host memory, as the
    kubelet and kube-scheduler's NodeResourcesFit judge the pinned pod. A node whose
    allocatable is unknown passes (``node_columns.UNKNOWN_HOST_FREE``).

    | CPU fits | memory fits | code                       |
    |----------|-------------|----------------------------|
    | yes      | yes         | 0 (passes)                 |
    | no       | any         | 1 "insufficient CPU"       |
    | yes      | no          | 2 "insufficient memory"    |

    Example: 8000 allocatable, 6500 requested, pod asks 2000 -> 1500 < 2000 -> 1.
    """

    NAME = "NodeResourcesFit"
    REASONS = ("insufficient CPU", "insufficient memory")

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        request = state.request
        cpu = state.snapshot.cpu_free_milli.take(nodes) < request.cpu_milli
        memory = state.snapshot.host_memory_free_mib.take(nodes) < request.host_memory_mib
        return np.where(cpu, 1, np.where(memory, 2, 0))

    def explain(self, state: CycleState, node: int, code: int) -> str:
        snapshot, request = state.snapshot, state.request
        if code == 1:
            return f"{int(snapshot.cpu_free_milli[node])}m CPU free < {request.cpu_milli}m requested"
        return f"{int(snapshot.host_memory_free_mib[node])} MiB memory free < {request.host_memory_mib} MiB requested"
