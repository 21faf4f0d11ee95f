"""Diagnosis: why nodes were rejected, counted the way kube-scheduler counts, said in sentences.

``0/12 nodes are available: 5 nodes have insufficient GPU memory, 4 nodes have mean GPU
utilization >= 90%, 1 node is cordoned``
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.core.wording import nodes_that

# Reasons a node's hardware decides, whatever is free, configured or measured: no other change
# to the cluster fixes them, so they lead when they tie with another reason.
HARDWARE_MEMORY = "insufficient GPU memory"
HARDWARE_GPUS = "node has fewer GPUs than the gang"
HARDWARE_REASONS = frozenset({HARDWARE_MEMORY, HARDWARE_GPUS})
# The request's own earlier replicas hold what this node would give (see ``advice``).
HELD_BY_REQUEST = "capacity held by this request's earlier replicas"

# Each reason as a predicate of "1 node ..." / "2 nodes ...": (singular, plural).
_PREDICATES: dict[str, tuple[str, str]] = {
    "unknown GPU model": ("has an unknown GPU model", "have an unknown GPU model"),
    "GPU model not accepted": ("has a GPU model the request does not accept",
                               "have GPU models the request does not accept"),
    "node labels do not match": ("has labels that do not match the request",
                                 "have labels that do not match the request"),
    "untolerated taint": ("has an untolerated taint", "have untolerated taints"),
    HARDWARE_GPUS: ("has fewer GPUs than the gang", "have fewer GPUs than the gang"),
    "not enough free GPUs for the gang": ("has too few free GPUs for the gang", "have too few free GPUs for the gang"),
    HARDWARE_MEMORY: ("has insufficient GPU memory", "have insufficient GPU memory"),
    "insufficient free GPU share": ("has insufficient free GPU share", "have insufficient free GPU share"),
    "no free GPU or partition": ("has no free GPU or partition", "have no free GPU or partition"),
    "node not ready": ("is not ready", "are not ready"),
    "cordoned": ("is cordoned", "are cordoned"),
    "sharing mode not requested": ("is in a sharing mode the request does not accept",
                                   "are in sharing modes the request does not accept"),
    "multi-GPU requests need whole GPUs": ("shares its GPUs, and multi-GPU requests need whole GPUs",
                                           "share their GPUs, and multi-GPU requests need whole GPUs"),
    "MPS cannot run on MIG GPUs": ("has MIG GPUs, where MPS cannot run", "have MIG GPUs, where MPS cannot run"),
    "MPS clients exceed the GPU's limit": ("has more MPS clients than its GPUs allow",
                                           "have more MPS clients than their GPUs allow"),
    "MPS share too small": ("has MPS shares too small for the request", "have MPS shares too small for the request"),
    "time-slice share too small": ("has time-slice shares too small for the request",
                                   "have time-slice shares too small for the request"),
    "namespace GPU quota exceeded": ("would take the namespace over its GPU quota",
                                     "would take the namespace over its GPU quota"),
    HELD_BY_REQUEST: ("has capacity held only by this request's earlier replicas",
                      "have capacity held only by this request's earlier replicas"),
}


def counted_reason(reason: str, count: int) -> str:
    """"1 node is cordoned", "2 nodes have insufficient GPU memory"; a reason without a known
    predicate reads "3 nodes are ruled out: <reason>"."""
    if reason in _PREDICATES:
        singular, plural = _PREDICATES[reason]
    elif reason.startswith("utilization "):  # UtilizationLimit's reason carries its threshold
        singular, plural = f"has mean GPU {reason}", f"have mean GPU {reason}"
    else:
        singular, plural = f"is ruled out: {reason}", f"are ruled out: {reason}"
    return nodes_that(count, singular, plural)


@dataclass(frozen=True)
class Diagnosis:
    """Node counts: all, available (passed every filter) and rejected per reason.

    Each rejected node counts once, under the reason of the first filter that rejected it, so the
    counts add up to ``total_nodes - available``. (A cycle that places nothing counts a node
    its hardware rules out under that hardware reason: see ``Scheduler.schedule``.)
    """

    total_nodes: int
    available: int
    rejected: Mapping[str, int] = field(default_factory=dict)

    def ordered(self) -> list[tuple[str, int]]:
        """Reasons, most nodes first; on equal counts a hardware reason first (nothing else fixes
        it), then alphabetically (a stable message)."""
        return sorted(self.rejected.items(), key=lambda item: (-item[1], item[0] not in HARDWARE_REASONS, item[0]))

    def dominant(self) -> tuple[str, int] | None:
        """The reason that rules out the most nodes (see ``ordered``), None when none does."""
        reasons = [(reason, count) for reason, count in self.ordered() if count]
        return reasons[0] if reasons else None

    def message(self) -> str:
        """"A/N nodes are available: 2 nodes have reason1, 1 node is reason2" (no reasons part when none)."""
        head = f"{self.available}/{self.total_nodes} nodes are available"
        parts = [counted_reason(reason, count) for reason, count in self.ordered() if count]
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
