"""Value types of the placement core: cluster state, requests, what a placement is given.

Pure Python (no Django): ``scheduler.adapters`` maps ORM rows onto these types and back, so the
core can be benchmarked and property-tested alone. The request enums below (and the node ones
in ``nodes.vocabulary``) are the only definitions of those words: the Django models derive their
choices from them, so values read from the database are the very values the core compares.

Partitions follow one rule per sharing mode (it keeps the snapshot's accounting simple):

- MIG instances are fixed by the GPU's layout: every instance is listed, free or occupied.
- Every other kind (whole GPU, MPS slot, weighted MPS share, time-slice replica) is listed only
  while occupied: a reservation appends one, a release removes it. Free capacity is what the
  node's mode and ``sharing_replicas`` (R) leave over. An adapter that keeps free partition rows
  in the database simply leaves them out (or lists them with no occupant: they are ignored).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nodes.catalog import MIG_COMPUTE_SLICES, find_model
from nodes.vocabulary import SHARE_MILLI_FULL, LabelledStrEnum, PartitionKind, SharingMode, Taint


class SharingRequest(LabelledStrEnum):
    """The sharing a deploy request asks for; ``auto`` lets the scheduler choose."""

    AUTO = "auto", "Automatic"
    EXCLUSIVE = "exclusive", "Exclusive"
    MIG = "mig", "MIG"
    MPS = "mps", "MPS (uniform)"
    MPS_WEIGHTED = "mps-weighted", "MPS (weighted)"
    TIMESLICE = "timeslice", "Time-slicing"


class Priority(LabelledStrEnum):
    """How much a deploy request matters when it competes for GPUs and power."""

    HIGH = "high", "High"
    MEDIUM = "medium", "Medium"
    LOW = "low", "Low"


class WorkloadType(LabelledStrEnum):
    """What a deployment does with its GPUs (it decides which GPU models suit it)."""

    INFERENCE = "inference", "Inference"
    SERVING = "serving", "Serving"
    TRAINING = "training", "Training"
    DEVELOPMENT = "development", "Development"
    BATCH = "batch", "Batch"


# Which partition kinds a node of each mode can hand out. A MIG node may keep some GPUs with MIG
# disabled (mig-parted `mig-enabled: false`); those are handed out whole.
MODE_KINDS: dict[SharingMode, frozenset[PartitionKind]] = {
    SharingMode.EXCLUSIVE: frozenset({PartitionKind.EXCLUSIVE}),
    SharingMode.MIG: frozenset({PartitionKind.MIG, PartitionKind.EXCLUSIVE}),
    SharingMode.MPS: frozenset({PartitionKind.MPS}),
    SharingMode.MPS_WEIGHTED: frozenset({PartitionKind.MPS_WEIGHTED}),
    SharingMode.TIMESLICE: frozenset({PartitionKind.TIMESLICE}),
}

# Which partition kinds a request's sharing choice accepts.
REQUEST_KINDS: dict[SharingRequest, frozenset[PartitionKind]] = {
    SharingRequest.AUTO: frozenset(PartitionKind),
    SharingRequest.EXCLUSIVE: frozenset({PartitionKind.EXCLUSIVE}),
    SharingRequest.MIG: frozenset({PartitionKind.MIG}),
    SharingRequest.MPS: frozenset({PartitionKind.MPS}),
    SharingRequest.MPS_WEIGHTED: frozenset({PartitionKind.MPS_WEIGHTED}),
    SharingRequest.TIMESLICE: frozenset({PartitionKind.TIMESLICE}),
}


def mig_share_milli(compute_slices: int) -> int:
    """Compute share of a MIG instance in thousandths: its compute slices out of 7 (3g -> 428)."""
    return compute_slices * SHARE_MILLI_FULL // MIG_COMPUTE_SLICES


def slot_share_milli(replicas: int) -> int:
    """Share of one of R uniform slots (MPS client or time-slice replica): 1000 // R."""
    return SHARE_MILLI_FULL // max(replicas, 1)


@dataclass(frozen=True)
class Toleration:
    """A Kubernetes pod toleration (operator ``Equal`` or ``Exists``; empty effect = any)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' rule: an empty key with Exists tolerates every taint; else key, value, effect match."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value



@dataclass
class PartitionState:
    """One partition on a GPU; ``occupant`` is a placement key or "namespace/pod", "" when free."""

    kind: PartitionKind
    slot: int
    share_milli: int
    memory_mib: int
    occupant: str = ""
    mig_profile: str = ""
    mig_start: int | None = None
    mig_size: int | None = None

    @property
    def is_free(self) -> bool:
        return not self.occupant


@dataclass
class GPUState:
    """One GPU: memory, MIG flag, partitions and latest telemetry (None where no sample yet)."""

    index: int
    memory_mib: int
    mig_enabled: bool = False
    partitions: list[PartitionState] = field(default_factory=list)
    utilization_pct: float | None = None
    memory_used_mib: int | None = None
    power_w: float | None = None

    def occupied(self) -> list[PartitionState]:
        """The partitions someone holds."""
        return [p for p in self.partitions if p.occupant]

    @property
    def allocated_milli(self) -> int:
        return sum(p.share_milli for p in self.partitions if p.occupant)

    @property
    def allocated_memory_mib(self) -> int:
        return sum(p.memory_mib for p in self.partitions if p.occupant)


@dataclass
class NodeState:
    """One node as the scheduler sees it. All its GPUs are of ``gpu_model`` (a catalog key).

``gpus`` are listed in index order.
    ``gpu_model`` is "" (or a key the catalog lacks) when GFD reported an unknown product: such a
    node is never chosen, and the decision says why. ``sharing_replicas`` is R for mps,
    mps-weighted (pods admitted per GPU) and timeslice; 1 otherwise.
    """

    name: str
    gpu_model: str
    sharing_mode: SharingMode
    gpus: list[GPUState]
    sharing_replicas: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    cordoned: bool = False
    # Host resources as the kubelet sees them (allocatable, and requested by pods already bound);
    # None where unknown: the NodeResourcesFit filter then lets every request through.
    # ``*_requested`` counts the pods gpuplane did not place (inventory sync reads every pod on the
    # node, as kube-scheduler's NodeResourcesFit does); ``host_holds`` what gpuplane's own
    # placements hold, by placement key: (CPU milli, memory MiB), released with their partitions.
    cpu_allocatable_milli: int | None = None
    cpu_requested_milli: int = 0
    memory_allocatable_mib: int | None = None
    memory_requested_mib: int = 0
    host_holds: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def cpu_free_milli(self) -> int | None:
        if self.cpu_allocatable_milli is None:
            return None
        return self.cpu_allocatable_milli - self.cpu_requested_milli - sum(c for c, _ in self.host_holds.values())

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_allocatable_mib is None:
            return None
        return self.memory_allocatable_mib - self.memory_requested_mib - sum(m for _, m in self.host_holds.values())

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.cordoned


@dataclass(frozen=True)
class QuotaUsage:
    """A namespace's GPU quota and what it holds, as the caller knows it now; None limits mean unlimited.

    ``gpu_milli`` counts compute shares (a whole GPU is 1000, an MPS slot of R=4 is 250).
    """

    gpu_milli_limit: int | None = None
    gpu_milli_used: int = 0
    memory_mib_limit: int | None = None
    memory_mib_used: int = 0


@dataclass(frozen=True)
class PlacementRequest:
    """One replica to place: what the deploy request says, plus its quota context.

    ``memory_mib`` is the GPU memory the replica needs in total; with ``gpu_count`` > 1
    (tensor parallel) it is spread evenly over the GPUs; ``gpu_count`` 0 is a CPU-only pod (it
    holds CPU and host memory only: the trace replay's other teams' pods). ``share_milli`` overrides the compute
    share that classification would pick. ``gpu_models`` lists accepted catalog keys or families
    ("A100"), empty = any. ``key`` names the placement in the reserved partitions (for release).
    """

    key: str
    memory_mib: int
    gpu_count: int = 1
    priority: Priority = Priority.MEDIUM
    latency_slo_ms: int | None = None
    workload_type: WorkloadType = WorkloadType.INFERENCE
    namespace: str = "default"
    sharing: SharingRequest = SharingRequest.AUTO
    share_milli: int | None = None
    gpu_models: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    enable_gpu_selection: bool = True
    allow_default_scheduler: bool = True
    quota: QuotaUsage | None = None
    # The pod's CPU (milli) and host memory (MiB) requests; 0 = none stated.
    cpu_milli: int = 0
    host_memory_mib: int = 0


@dataclass(frozen=True)
class PartitionGrant:
    """One partition handed to a placement (what the adapter stores as a Partition row)."""

    gpu_index: int
    kind: PartitionKind
    slot: int
    share_milli: int
    memory_mib: int
    mig_profile: str = ""
    mig_start: int | None = None
    mig_size: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "gpu_index": self.gpu_index,
            "kind": str(self.kind),
            "slot": self.slot,
            "share_milli": self.share_milli,
            "memory_mib": self.memory_mib,
            "mig_profile": self.mig_profile,
            "mig_start": self.mig_start,
            "mig_size": self.mig_size,
        }


@dataclass(frozen=True)
class Assignment:
    """Where on the chosen node a placement goes, and what its pod must request and set.

    ``resources`` are the pod's extended-resource limits (``nvidia.com/gpu`` or
    ``nvidia.com/mig-<profile>``, the mixed MIG strategy); ``env`` the MPS variables.
    ``cpu_milli`` / ``host_memory_mib`` are the pod's host requests, held on the node with the
    partitions (a CPU-only pod holds only these: no partitions, ``kind`` exclusive by convention).
    """

    node: str
    key: str
    kind: PartitionKind
    partitions: tuple[PartitionGrant, ...]
    resources: Mapping[str, int]
    env: Mapping[str, str]
    cpu_milli: int = 0
    host_memory_mib: int = 0

    @property
    def gpu_indexes(self) -> tuple[int, ...]:
        return tuple(p.gpu_index for p in self.partitions)

    @property
    def share_milli(self) -> int:
        """Compute share charged for this placement, summed over its GPUs."""
        return sum(p.share_milli for p in self.partitions)

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "key": self.key,
            "kind": str(self.kind),
            "gpu_indexes": list(self.gpu_indexes),
            "partitions": [p.to_dict() for p in self.partitions],
            "resources": dict(self.resources),
            "env": dict(self.env),
            "cpu_milli": self.cpu_milli,
            "host_memory_mib": self.host_memory_mib,
        }


def gpu_family(model_key: str) -> str:
    """The family part of a catalog key ("A100-SXM4-40GB" -> "A100", "L40S" -> "L40S")."""
    return model_key.split("-", 1)[0]


def new_gpus(
    model_key: str,
    count: int,
    *,
    mig_layout: Mapping[str, int] | None = None,
    mig_gpus: int | None = None,
) -> list[GPUState]:
    """Build ``count`` empty GPUs of a catalog model, the first ``mig_gpus`` with ``mig_layout``.

    ``mig_layout`` maps profile names to counts ({"3g.20gb": 1, "2g.10gb": 2}); it is placed with
    ``nodes.mig.plan_layout`` (which raises ``InvalidMIGLayout`` for an impossible one). Meant for
    tests, benchmarks and the demo; the adapter builds GPUs from the inventory instead.
    """
    model = find_model(model_key)
    gpus = [GPUState(index=i, memory_mib=model.memory_mib) for i in range(count)]
    if mig_layout:
        from nodes.mig import plan_layout

        placements = plan_layout(model, mig_layout)
        for gpu in gpus[: count if mig_gpus is None else mig_gpus]:
            gpu.mig_enabled = True
            for slot, placement in enumerate(placements):
                profile = model.mig_profile(placement.profile)
                gpu.partitions.append(
                    PartitionState(
                        kind=PartitionKind.MIG,
                        slot=slot,
                        share_milli=mig_share_milli(profile.compute_slices),
                        memory_mib=profile.memory_mib,
                        mig_profile=profile.name,
                        mig_start=placement.start,
                        mig_size=placement.size,
                    )
                )
    return gpus
