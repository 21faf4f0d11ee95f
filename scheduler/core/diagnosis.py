"""Diagnosis: why nodes were rejected, rendered the way kube-scheduler says it.

``0/12 nodes are available: 5 insufficient GPU memory, 4 utilization >= 90%, 3 cordoned``
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Diagnosis:
    """Node counts: all, available (passed every filter) and rejected per reason.

    Each rejected node counts once, under the reason of the first filter that rejected it, so the
    counts add up to ``total_nodes - available``.
    """

    total_nodes: int
    available: int
    rejected: Mapping[str, int] = field(default_factory=dict)

    def ordered(self) -> list[tuple[str, int]]:
        """Reasons, most nodes first; equal counts alphabetically (a stable message)."""
        return sorted(self.rejected.items(), key=lambda item: (-item[1], item[0]))

    def message(self) -> str:
        """"A/N nodes are available: c1 reason1, c2 reason2" (no reasons part when none)."""
        head = f"{self.available}/{self.total_nodes} nodes are available"
        parts = [f"{count} {reason}" for reason, count in self.ordered() if count]
        return f"{head}: {', '.join(parts)}" if parts else head

    def __str__(self) -> str:
        return self.message()

    def to_dict(self) -> dict[str, object]:
        return {
            "total_nodes": self.total_nodes,
            "available": self.available,
            "rejected": dict(self.ordered()),
            "message": self.message(),
        }
