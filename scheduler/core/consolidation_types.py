"""What the consolidation planner (``scheduler.core.consolidation``) takes and answers: nodes and
their GPUs, workloads, namespace quotas, moves and the result. Pure Python, no Django."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

WHOLE_GPU_MILLI = 1000
UNLIMITED = 1 << 30  # clients left on a GPU without a client limit


@dataclass(frozen=True)
class PlanGPU:
    index: int
    free_milli: int
    clients_left: int | None = None  # MPS / time-slice clients it still takes; None: no limit
    free_mig: Mapping[str, int] = field(default_factory=dict)  # free MIG partitions by profile


@dataclass(frozen=True)
class PlanNode:
    name: str
    gpus: tuple[PlanGPU, ...]
    sharing_mode: str = "exclusive"
    gpu_model: str = ""
    cpu_left_milli: int = UNLIMITED
    memory_left_mib: int = UNLIMITED
    cordoned: bool = False
    slot_milli: int | None = None  # what one shared replica is charged per GPU here (1000/R); None: its share


@dataclass(frozen=True)
class PlanQuota:
    """A namespace's quota as the scheduler enforces it, and its use now; None limits: unlimited."""

    gpu_milli_limit: int | None = None
    gpu_milli_used: int = 0
    memory_mib_limit: int | None = None
    memory_mib_used: int = 0


@dataclass(frozen=True)
class PlanWorkload:
    """One replica. ``share_milli`` is per GPU (1000: whole GPUs); no ``gpus``: a CPU-only pod.
    ``group`` is what its PodDisruptionBudget covers (its deployment)."""

    key: str
    group: str
    node: str
    gpus: tuple[int, ...]
    share_milli: int
    sharing: str = "exclusive"
    mig_profile: str = ""
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: tuple[str, ...] = ()
    priority: int = 0
    do_not_disrupt: bool = False
    namespace: str = ""
    quota_memory_mib: int = 0  # GPU memory its namespace's quota is charged for a replica

    @property
    def used_milli(self) -> int:
        return self.share_milli * len(self.gpus)


def quota_charge(node: PlanNode, w: PlanWorkload) -> int:
    """Compute milli a replica of ``w`` is charged on ``node``: a shared one takes the node's slot."""
    if node.slot_milli is not None and w.share_milli < WHOLE_GPU_MILLI and not w.mig_profile:
        return node.slot_milli * len(w.gpus)
    return w.used_milli


@dataclass(frozen=True)
class Move:
    workload: str
    group: str
    from_node: str
    from_gpus: tuple[int, ...]
    to_node: str
    to_gpus: tuple[int, ...]
    mig_profile: str
    why: str

    def as_dict(self) -> dict[str, object]:
        return {"workload": self.workload, "group": self.group, "from_node": self.from_node,
                "from_gpus": list(self.from_gpus), "to_node": self.to_node, "to_gpus": list(self.to_gpus),
                "mig_profile": self.mig_profile, "why": self.why}


@dataclass(frozen=True)
class Skipped:
    node: str
    gpu: int | None
    reason: str


@dataclass(frozen=True)
class ConsolidationResult:
    moves: tuple[Move, ...]
    nodes_freed: tuple[str, ...]
    gpus_freed: tuple[tuple[str, int], ...]  # every GPU of a freed node, then GPUs emptied elsewhere
    pdb_budget_used: Mapping[str, int]
    skipped: tuple[Skipped, ...]
    method: str

    @property
    def workloads_moved(self) -> int:
        return len(self.moves)
