"""How a pod that reached the admission webhook should share its GPU (seed 003's flow, checked).

Pure Python (no Django). ``choose_sharing(pod, policies, cluster)`` answers, for one pod, either
"leave it alone" (exempt namespace, an opt-out) or a sharing strategy with its settings, and always
the reason. The order:

1. exempt namespaces, then the opt-outs ``gpuplane.io/optimize: "false"`` (leave the pod alone) and
   ``gpuplane.io/sharing: disabled`` (place it, on whole GPUs), read from labels or annotations;
2. a pod that already asks for a MIG profile (``nvidia.com/mig-<profile>``) keeps it;
3. the sharing policies whose selector matches, highest precedence first (ties: by name);
4. seed 003's defaults: training -> exclusive; one GPU, a stated GPU memory below 20 GB and a free
   MIG instance that fits -> the smallest such profile; inference/serving -> MPS;
   development/batch -> time-slicing with replicas from observed utilization and burstiness.

Every candidate is checked against what NVIDIA's components can do (``refusal``) before it is
chosen; a refused candidate is recorded with its reason and the next one is tried, down to
exclusive, which is always possible. The 20 GB rule reads the GPU memory the pod states
(``gpuplane.io/gpu-memory``), never its host RAM request: seed 003 read RAM, which is wrong.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from nodes.contract import GPUPLANE_PREFIX
from nodes.vocabulary import MIB_PER_GB, SharingMode
from scheduler.core.types import SharingRequest, WorkloadType

LABEL_OPTIMIZE = f"{GPUPLANE_PREFIX}/optimize"  # "false": gpuplane leaves the pod alone
LABEL_SHARING_OPT_OUT = f"{GPUPLANE_PREFIX}/sharing"  # "disabled": whole GPUs, never shared
SHARING_DISABLED = "disabled"
LABEL_WORKLOAD_TYPE = f"{GPUPLANE_PREFIX}/workload-type"

MIG_MEMORY_LIMIT_MIB = 20 * MIB_PER_GB  # seed 003: below 20 GB of GPU memory, a MIG slice is enough
# CUDA MPS: 48 clients per GPU from compute capability 7.5 (Turing) on, 16 on Volta.
MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_BEFORE_7_5 = 16
TIMESLICE_DEFAULT_REPLICAS = 4  # no observations yet: the device plugin documentation's example
TIMESLICE_MAX_REPLICAS = 16


class FairnessMode(StrEnum):
    """Time-slicing fairness: the driver's default round robin, or equal slices per replica."""

    DEFAULT = "default"
    EQUAL = "equal"


@dataclass(frozen=True)
class PodFacts:
    """What the flow reads of one pod. ``gpu_memory_mib`` is the GPU memory it states (None: not
    stated); ``host_memory_mib`` its RAM request, carried only so tests can show it is never read
    as GPU memory. ``mig_profile`` is set when the pod itself asks for ``nvidia.com/mig-<profile>``.
    ``pinned_node`` is the node it names (nodeName or a hostname selector), "" for none."""

    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    gpu_count: int = 1
    gpu_memory_mib: int | None = None
    host_memory_mib: int = 0
    mig_profile: str = ""
    pinned_node: str = ""
    utilization_pct: float | None = None  # observed for its workload, when known
    burstiness_pct: float | None = None

    def setting(self, key: str) -> str | None:
        """A gpuplane key from the pod's labels, else its annotations."""
        value = self.labels.get(key)
        return value if value is not None else self.annotations.get(key)

    @property
    def workload_type(self) -> WorkloadType | None:
        value = (self.setting(LABEL_WORKLOAD_TYPE) or "").strip().lower()
        return WorkloadType(value) if value in WorkloadType.values() else None


@dataclass(frozen=True)
class PolicyRule:
    """A sharing policy as the flow sees it (``scheduler.models.SharingPolicy`` maps onto it).

    Selects pods by namespace (empty: every namespace) and labels (all must match). The settings
    apply to their strategy only: ``mig_profile`` "" means the smallest fitting free instance;
    ``timeslice_replicas`` None means "from observed utilization" (``timeslice_replicas``)."""

    name: str
    strategy: SharingRequest
    precedence: int = 0
    namespaces: tuple[str, ...] = ()
    match_labels: Mapping[str, str] = field(default_factory=dict)
    mig_profile: str = ""
    mps_max_clients: int | None = None
    mps_memory_limit_mib: int | None = None
    timeslice_replicas: int | None = None
    fairness: FairnessMode = FairnessMode.DEFAULT

    def selects(self, pod: PodFacts) -> bool:
        if self.namespaces and pod.namespace not in self.namespaces:
            return False
        return all(pod.labels.get(key) == value for key, value in self.match_labels.items())


@dataclass(frozen=True)
class MIGRoom:
    """A free MIG instance somewhere in the cluster: its profile and the memory NVML gives it."""

    profile: str
    memory_mib: int


@dataclass(frozen=True)
class ClusterFacts:
    """What the flow needs of the cluster: exempt namespaces, the free MIG instances, and the
    pinned node's mode and compute capability when the pod names a node gpuplane knows."""

    exempt_namespaces: frozenset[str] = frozenset()
    mig_room: tuple[MIGRoom, ...] = ()
    pinned_mode: SharingMode | None = None
    pinned_compute_capability: tuple[int, int] | None = None


class Action(StrEnum):
    PLACE = "place"
    LEAVE = "leave"


@dataclass(frozen=True)
class SharingChoice:
    """The flow's answer: leave the pod alone, or place it with ``sharing`` and these settings."""

    action: Action
    reason: str
    sharing: SharingRequest = SharingRequest.EXCLUSIVE
    policy: str = ""  # the policy that chose it; "" for seed 003's defaults or an opt-out
    mig_profile: str = ""
    mps_max_clients: int | None = None
    mps_memory_limit_mib: int | None = None
    timeslice_replicas: int | None = None
    fairness: FairnessMode = FairnessMode.DEFAULT
    refused: tuple[str, ...] = ()  # candidates turned down on the way, each with NVIDIA's reason

    @property
    def places(self) -> bool:
        return self.action == Action.PLACE

    def to_dict(self) -> dict[str, object]:
        return {"action": str(self.action), "reason": self.reason, "sharing": str(self.sharing),
                "policy": self.policy, "mig_profile": self.mig_profile, "mps_max_clients": self.mps_max_clients,
                "mps_memory_limit_mib": self.mps_memory_limit_mib, "timeslice_replicas": self.timeslice_replicas,
                "fairness": str(self.fairness), "refused": list(self.refused)}


def timeslice_replicas(utilization_pct: float | None, burstiness_pct: float | None) -> tuple[int, str]:
    """Seed 003's table: time-slice replicas for a workload's observed utilization and burstiness.

    < 20 % used and > 70 % bursty -> 8; < 40 % and > 50 % bursty -> 4; up to 60 % -> 2; above 60 %
    -> 1 (no sharing). The seed leaves gaps (e.g. 10 % used, 30 % bursty): those fall to the next
    row down, so an idle but steady workload gets 2, never more than its burstiness earns.
    """
    if utilization_pct is None:
        return TIMESLICE_DEFAULT_REPLICAS, f"no utilization observed yet: {TIMESLICE_DEFAULT_REPLICAS} replicas"
    bursty = burstiness_pct or 0.0
    seen = f"{utilization_pct:g} % utilization, {bursty:g} % bursty"
    if utilization_pct > 60:
        return 1, f"{seen}: above 60 % a GPU is not shared"
    if utilization_pct < 20 and bursty > 70:
        return 8, f"{seen}: below 20 % and over 70 % bursty -> 8 replicas"
    if utilization_pct < 40 and bursty > 50:
        return 4, f"{seen}: below 40 % and over 50 % bursty -> 4 replicas"
    return 2, f"{seen}: up to 60 % -> 2 replicas"


def mps_client_limit(compute_capability: tuple[int, int] | None) -> int:
    """Most MPS clients per GPU: 48 from compute capability 7.5, 16 before (unknown GPU: 48)."""
    if compute_capability is not None and compute_capability < (7, 5):
        return MPS_MAX_CLIENTS_BEFORE_7_5
    return MPS_MAX_CLIENTS


def refusal(candidate: SharingChoice, pod: PodFacts, cluster: ClusterFacts) -> str:
    """Why NVIDIA's components cannot give ``pod`` this candidate ("" when they can)."""
    sharing = candidate.sharing
    if sharing in (SharingRequest.MPS, SharingRequest.TIMESLICE) and pod.gpu_count > 1:
        return (f"{sharing.label} gives one replica of one GPU per pod: the device plugin refuses requests "
                f"for more than one (failRequestsGreaterThanOne), and the pod asks for {pod.gpu_count} GPUs")
    if sharing == SharingRequest.MPS:
        if cluster.pinned_mode == SharingMode.MIG or pod.mig_profile:
            return "MPS runs on full GPUs only, never on MIG devices (device plugin), and the pod's node is in MIG mode"
        limit = mps_client_limit(cluster.pinned_compute_capability)
        if candidate.mps_max_clients is not None and not 2 <= candidate.mps_max_clients <= limit:
            return (f"MPS serves at most {limit} clients per GPU (CUDA MPS, compute capability "
                    f"{'>= 7.5' if limit == MPS_MAX_CLIENTS else '< 7.5'}); the policy asks for "
                    f"{candidate.mps_max_clients}")
        if (candidate.mps_memory_limit_mib is not None and pod.gpu_memory_mib is not None
                and candidate.mps_memory_limit_mib < pod.gpu_memory_mib):
            return (f"the MPS pinned memory limit ({candidate.mps_memory_limit_mib} MiB) is below the "
                    f"{pod.gpu_memory_mib} MiB the pod states it needs")
    if sharing == SharingRequest.MIG:
        if pod.gpu_count > 1:
            return f"a MIG instance is one slice of one GPU; the pod asks for {pod.gpu_count} GPUs"
        if cluster.pinned_mode is not None and cluster.pinned_mode != SharingMode.MIG:
            return f"the pod's node is in {cluster.pinned_mode.label} mode, not MIG"
        if not candidate.mig_profile:
            return "no free MIG instance in the cluster fits the pod's GPU memory"
    if sharing == SharingRequest.TIMESLICE and candidate.timeslice_replicas is not None:
        if not 2 <= candidate.timeslice_replicas <= TIMESLICE_MAX_REPLICAS:
            return (f"time-slicing needs 2 to {TIMESLICE_MAX_REPLICAS} replicas per GPU (the device plugin takes "
                    f"an integer >= 2); the candidate has {candidate.timeslice_replicas}")
    if sharing in (SharingRequest.TIMESLICE, SharingRequest.MPS) and cluster.pinned_mode == SharingMode.MIG:
        return f"{sharing.label} and MIG exclude each other on a node, and the pod's node is in MIG mode"
    return ""


def smallest_mig(room: Sequence[MIGRoom], memory_mib: int) -> MIGRoom | None:
    """The free instance with the least memory that still holds ``memory_mib`` (None if none)."""
    fitting = [r for r in room if r.memory_mib >= memory_mib]
    return min(fitting, key=lambda r: (r.memory_mib, r.profile)) if fitting else None


def _from_policy(policy: PolicyRule, pod: PodFacts, cluster: ClusterFacts) -> SharingChoice:
    reason = f"policy {policy.name} (precedence {policy.precedence}) selects the pod: {policy.strategy.label}"
    profile = policy.mig_profile
    replicas = policy.timeslice_replicas
    if policy.strategy == SharingRequest.MIG and not profile and pod.gpu_memory_mib is not None:
        found = smallest_mig(cluster.mig_room, pod.gpu_memory_mib)
        profile = found.profile if found else ""
    elif policy.strategy == SharingRequest.MIG and profile and pod.gpu_memory_mib is not None:
        sized = [r for r in cluster.mig_room if r.profile == profile]
        if sized and sized[0].memory_mib < pod.gpu_memory_mib:
            profile = ""
    if policy.strategy == SharingRequest.TIMESLICE and replicas is None:
        replicas, why = timeslice_replicas(pod.utilization_pct, pod.burstiness_pct)
        reason = f"{reason}; {why}"
    return SharingChoice(Action.PLACE, reason, policy.strategy, policy.name, mig_profile=profile,
                         mps_max_clients=policy.mps_max_clients, mps_memory_limit_mib=policy.mps_memory_limit_mib,
                         timeslice_replicas=replicas, fairness=policy.fairness)


def _defaults(pod: PodFacts, cluster: ClusterFacts) -> list[SharingChoice]:
    """Seed 003's candidates for a pod no policy chose, best first (exclusive last, always possible)."""
    kind = pod.workload_type or WorkloadType.INFERENCE
    named = "" if pod.workload_type else " (no gpuplane.io/workload-type: taken as inference)"
    exclusive = SharingChoice(Action.PLACE, f"{kind.label}{named}: whole GPUs", SharingRequest.EXCLUSIVE)
    if kind == WorkloadType.TRAINING:
        return [SharingChoice(Action.PLACE, "training takes whole GPUs (seed 003)", SharingRequest.EXCLUSIVE)]
    candidates = []
    if pod.gpu_count == 1 and pod.gpu_memory_mib is not None and pod.gpu_memory_mib < MIG_MEMORY_LIMIT_MIB:
        found = smallest_mig(cluster.mig_room, pod.gpu_memory_mib)
        stated = f"one GPU and {pod.gpu_memory_mib} MiB of GPU memory stated (< 20 GB)"
        candidates.append(SharingChoice(
            Action.PLACE, f"{stated}: the smallest free MIG instance that fits, {found.profile}" if found
            else stated, SharingRequest.MIG, mig_profile=found.profile if found else ""))
    if kind in (WorkloadType.INFERENCE, WorkloadType.SERVING):
        candidates.append(SharingChoice(Action.PLACE, f"{kind.label}{named}: MPS (seed 003)", SharingRequest.MPS))
    else:
        replicas, why = timeslice_replicas(pod.utilization_pct, pod.burstiness_pct)
        if replicas > 1:
            candidates.append(SharingChoice(Action.PLACE, f"{kind.label}: time-slicing, {why}",
                                            SharingRequest.TIMESLICE, timeslice_replicas=replicas))
        else:
            exclusive = SharingChoice(Action.PLACE, f"{kind.label}: {why}", SharingRequest.EXCLUSIVE)
    return [*candidates, exclusive]


def opt_out(pod: PodFacts, exempt_namespaces: frozenset[str]) -> SharingChoice | None:
    """The answer for an exempt namespace or an opted-out pod (None for every other pod): read
    first, from the pod alone, so that a pod left alone costs no look at policies or the cluster."""
    if pod.namespace in exempt_namespaces:
        return SharingChoice(Action.LEAVE, f"namespace {pod.namespace} is exempt from gpuplane's admission")
    if (pod.setting(LABEL_OPTIMIZE) or "").strip().lower() == "false":
        return SharingChoice(Action.LEAVE, f"the pod opts out with {LABEL_OPTIMIZE}: \"false\"")
    if (pod.setting(LABEL_SHARING_OPT_OUT) or "").strip().lower() == SHARING_DISABLED:
        return SharingChoice(Action.PLACE, f"the pod opts out of sharing with {LABEL_SHARING_OPT_OUT}: disabled; "
                             "whole GPUs", SharingRequest.EXCLUSIVE)
    return None


def choose_sharing(pod: PodFacts, policies: Sequence[PolicyRule], cluster: ClusterFacts) -> SharingChoice:
    """The sharing ``pod`` gets, or why it is left alone; see the module docstring for the order."""
    early = opt_out(pod, cluster.exempt_namespaces)
    if early is not None:
        return early
    if pod.mig_profile:
        return SharingChoice(Action.PLACE, f"the pod asks for MIG profile {pod.mig_profile} itself",
                             SharingRequest.MIG, mig_profile=pod.mig_profile)
    refused: list[str] = []
    ordered = sorted(policies, key=lambda p: (-p.precedence, p.name))
    candidates = [_from_policy(p, pod, cluster) for p in ordered if p.selects(pod)] + _defaults(pod, cluster)
    for candidate in candidates:
        why = refusal(candidate, pod, cluster)
        if not why:
            return SharingChoice(**{**candidate.__dict__, "refused": tuple(refused)})
        who = f"policy {candidate.policy}" if candidate.policy else "seed 003's default"
        refused.append(f"{who} ({candidate.sharing.label}) refused: {why}")
    # Exclusive is the last candidate and never refused; kept for the type checker's sake.
    return SharingChoice(Action.PLACE, "whole GPUs: every sharing candidate was refused", SharingRequest.EXCLUSIVE,
                         refused=tuple(refused))
