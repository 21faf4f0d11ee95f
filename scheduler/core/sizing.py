"""Sizing: how large a unit each sharing mode must give a request, and the rule that said so.

Each mode sizes by its own unit (docs/design.md section 3):

| unit kind    | sized by                                              |
|--------------|-------------------------------------------------------|
| exclusive    | whole GPUs with enough memory each                    |
| mig          | memory: the smallest free instance that holds it; its |
|              | compute follows the profile                           |
| mps          | compute share: the class's default share (or stated)  |
| mps-weighted | compute share: the class's default share (or stated)  |
| timeslice    | memory: a replica on a GPU with that much left        |

The class's share (25 / 50 % or exclusive) is only a default for MPS. It becomes a demand on
every kind when the share is not a default: a stated ``share_milli`` (the user asked for that
much compute, so a MIG instance or a time-slice replica's nominal 1000 // R must cover it too),
an explicit ``exclusive``, a multi-GPU replica, the latency override, or a large model under
``auto`` (the class asks for an exclusive GPU, so a 7g instance or R=1 is the least that serves).

``size`` computes this once per cycle (``Need`` carries it); ``sizing_rule`` words the rule that
sized a placement ("MIG: smallest free instance with at least 8 GB -> 1g.10gb").
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL, PartitionKind
from scheduler.core.classify import Classification
from scheduler.core.node_columns import KIND_ID, KINDS
from scheduler.core.types import Assignment, PlacementRequest, SharingRequest


class ShareBasis(StrEnum):
    """Where the request's compute share came from."""

    DEFAULT = "default"  # the class's default share (a demand for MPS only)
    REQUESTED = "requested"  # the request stated share_milli
    EXCLUSIVE = "exclusive"  # sharing: exclusive
    MULTI_GPU = "multi-gpu"  # a tensor-parallel replica takes whole GPUs
    LATENCY = "latency"  # HIGH priority with a tight latency SLO
    LARGE = "large"  # a large model under auto: the class asks for an exclusive GPU
    CPU_ONLY = "cpu-only"  # no GPU at all: the pod holds CPU and host memory only


# Kinds whose unit is sized by memory, not compute, when the share is only the class's default.
_MEMORY_SIZED = frozenset({PartitionKind.MIG, PartitionKind.TIMESLICE})


@dataclass(frozen=True)
class Sizing:
    """The request's compute share, where it came from, and the least unit share per kind.

    ``share_milli`` is what an MPS slot must cover and what a weighted share is; ``min_share_milli``
    is indexed by ``KIND_ID`` (0 = that kind is sized by memory alone).
    """

    share_milli: int
    basis: ShareBasis
    min_share_milli: tuple[int, ...]
    workload_class: str

    def min_share(self, kind: PartitionKind) -> int:
        """The least compute share a unit of ``kind`` must have."""
        return self.min_share_milli[KIND_ID[kind]]

    def to_dict(self) -> dict[str, object]:
        return {
            "share_milli": self.share_milli,
            "basis": str(self.basis),
            "min_share_milli": {str(kind): self.min_share(kind) for kind in KINDS},
        }


def size(request: PlacementRequest, classification: Classification) -> Sizing:
    """The share and per-kind demand of ``request`` (rules in the module docstring).

    Raises ``ValueError`` for a stated share outside 1..1000.
    """
    sharing = SharingRequest(request.sharing)
    if request.gpu_count == 0:
        return Sizing(share_milli=0, basis=ShareBasis.CPU_ONLY, min_share_milli=(0,) * len(KINDS),
                      workload_class=str(classification.workload_class))
    if request.gpu_count > 1:
        share, basis = SHARE_MILLI_FULL, ShareBasis.MULTI_GPU
    elif sharing == SharingRequest.EXCLUSIVE:
        share, basis = SHARE_MILLI_FULL, ShareBasis.EXCLUSIVE
    elif request.share_milli is not None:
        share, basis = request.share_milli, ShareBasis.REQUESTED
    elif classification.latency_override:
        share, basis = SHARE_MILLI_FULL, ShareBasis.LATENCY
    elif classification.exclusive and sharing == SharingRequest.AUTO:
        share, basis = SHARE_MILLI_FULL, ShareBasis.LARGE
    else:
        share, basis = classification.share_milli, ShareBasis.DEFAULT
    if not 1 <= share <= SHARE_MILLI_FULL:
        raise ValueError(f"share_milli must be within 1..{SHARE_MILLI_FULL}, got {share}")
    by_memory = basis == ShareBasis.DEFAULT
    demand = tuple(0 if by_memory and kind in _MEMORY_SIZED else share for kind in KINDS)
    return Sizing(share_milli=share, basis=basis, min_share_milli=demand,
                  workload_class=str(classification.workload_class))


def _gb(memory_mib: int) -> str:
    return f"{round(memory_mib / MIB_PER_GB, 2):g} GB"


def _percent(share_milli: int) -> str:
    return f"{round(share_milli / 10, 1):g} %"


def _share_phrase(sizing: Sizing) -> str:
    """Why the share is what it is: "50 % by default for a medium model", "30 % as requested"."""
    share = _percent(sizing.share_milli)
    return {
        ShareBasis.DEFAULT: f"{share} by default for a {sizing.workload_class} model",
        ShareBasis.REQUESTED: f"{share} as requested",
        ShareBasis.EXCLUSIVE: "a whole GPU as requested",
        ShareBasis.MULTI_GPU: "a whole GPU per GPU of a multi-GPU replica",
        ShareBasis.LATENCY: "a whole GPU for a HIGH-priority tight latency SLO",
        ShareBasis.LARGE: f"a whole GPU by default for a {sizing.workload_class} model",
        ShareBasis.CPU_ONLY: "no GPU",
    }[sizing.basis]


def kind_rule(sizing: Sizing, kind: PartitionKind, memory_per_gpu_mib: int, gpu_count: int = 1) -> str:
    """The rule that sizes a unit of ``kind`` for this request, without its outcome."""
    memory = _gb(memory_per_gpu_mib)
    compute = "" if sizing.min_share(kind) == 0 else f" and {_share_phrase(sizing)}"
    if kind == PartitionKind.TIMESLICE and compute:  # a replica's share is nominal (1000 // R)
        compute = f" and a nominal share of {_share_phrase(sizing)}"
    if kind == PartitionKind.EXCLUSIVE:
        gpus = f"{gpu_count} whole GPUs" if gpu_count > 1 else "a whole GPU"
        return f"exclusive: {gpus} with at least {memory} each"
    if kind == PartitionKind.MIG:
        return f"MIG: smallest free instance with at least {memory}{compute}"
    if kind == PartitionKind.TIMESLICE:
        return f"time-slicing: a replica with {memory} free{compute}"
    mode = "MPS" if kind == PartitionKind.MPS else "MPS (weighted)"
    return f"{mode}: {_share_phrase(sizing)}, at least {memory}"


def sizing_rule(sizing: Sizing, assignment: Assignment, memory_per_gpu_mib: int, gpu_count: int = 1) -> str:
    """The rule that sized ``assignment`` and what it gave ("... -> 1g.10gb")."""
    if not assignment.partitions:
        return "CPU-only: no GPU, CPU and host memory only"
    grant = assignment.partitions[0]
    kind = PartitionKind(assignment.kind)
    if kind == PartitionKind.MIG:
        got = grant.mig_profile
    elif kind == PartitionKind.EXCLUSIVE:
        got = f"GPU {', '.join(str(i) for i in assignment.gpu_indexes)}"
    elif kind == PartitionKind.TIMESLICE:
        got = f"a replica of GPU {grant.gpu_index} ({_gb(grant.memory_mib)} counted)"
    else:
        got = f"{_percent(grant.share_milli)} of GPU {grant.gpu_index}, {_gb(grant.memory_mib)}"
    return f"{kind_rule(sizing, kind, memory_per_gpu_mib, gpu_count)} -> {got}"
