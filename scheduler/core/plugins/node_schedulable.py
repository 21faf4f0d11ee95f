"""Filter NodeSchedulable: the node is Ready and not cordoned."""
from __future__ import annotations

import numpy as np

from scheduler.core.framework import CycleState, FilterPlugin


class NodeSchedulable(FilterPlugin):
    """Pass iff ``ready and not cordoned``.

    | ready | cordoned | code                |
    |-------|----------|---------------------|
    | yes   | no       | 0 (passes)          |
    | no    | any      | 1 "node not ready"  |
    | yes   | yes      | 2 "cordoned"        |

    Decided once per node group (both flags are group properties), then looked up per node.
    """

    NAME = "NodeSchedulable"
    REASONS = ("node not ready", "cordoned")

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        snapshot = state.snapshot
        by_group = np.where(~snapshot.group_ready, 1, np.where(snapshot.group_cordoned, 2, 0))
        return by_group.take(snapshot.group_id.take(nodes))
