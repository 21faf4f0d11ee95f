"""The ClusterBackend protocol and the plain value types it speaks.

Both backends read Kubernetes-shaped objects (Node, Pod JSON) and turn them into these types
through one parser (`nodes.cluster.parsing`), so the simulated cluster exercises exactly the
label and resource interpretation that a real cluster gets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar, runtime_checkable

from lifecycle.errors import UpstreamFailure
from nodes.vocabulary import Taint


@dataclass(frozen=True)
class MIGDevice:
    profile: str  # e.g. "3g.40gb"
    start: int  # placement start in memory slices (0..7)
    size: int  # placement size in memory slices
    uuid: str = ""
    memory_mib: int | None = None  # as NVML reports it (the node agent's report); None: the catalog's


@dataclass(frozen=True)
class GPUDevice:
    index: int
    uuid: str
    product: str
    memory_mib: int
    mig_enabled: bool = False
    mig_devices: tuple[MIGDevice, ...] = ()
    # False when `uuid` is the placeholder derived from the node name and index (nothing on the
    # cluster or from the node agent told the real one): inventory sync never lets a placeholder
    # replace a UUID a GPU row already has.
    uuid_known: bool = True


@dataclass(frozen=True)
class ClusterNode:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    taints: tuple[Taint, ...]
    ready: bool
    unschedulable: bool
    cpu_allocatable_milli: int
    memory_allocatable_mib: int
    allocatable: dict[str, int]  # extended resources, e.g. {"nvidia.com/gpu": 8}
    gpus: tuple[GPUDevice, ...]
    resource_version: str = ""  # metadata.resourceVersion: changes with every write of the object


@dataclass(frozen=True)
class ClusterPod:
    namespace: str
    name: str
    node_name: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool
    labels: dict[str, str]
    annotations: dict[str, str]
    gpu_requests: dict[str, int]  # e.g. {"nvidia.com/gpu": 1} or {"nvidia.com/mig-3g.40gb": 1}; {} for no GPU
    priority_class_name: str = ""
    owner_kind: str = ""  # "DaemonSet", "ReplicaSet", ... ("" for a bare pod)
    resource_version: str = ""  # metadata.resourceVersion: changes with every write of the object
    # What it requests of its node, as NodeResourcesFit counts it (nodes.cluster.parsing).
    cpu_request_milli: int = 0
    memory_request_mib: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ClusterPDB:
    """A policy/v1 PodDisruptionBudget: its matchLabels and its budget (an int, a "N%" string,
    or None where the spec leaves it out; Kubernetes allows one of the two)."""

    namespace: str
    name: str
    match_labels: dict[str, str]
    min_available: int | str | None = None
    max_unavailable: int | str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ClusterConfigMap:
    """A v1 ConfigMap: its text entries, labels and the resourceVersion it was read at ("" for one
    not yet stored: writing it creates it; else writing replaces it only if nobody changed it since)."""

    namespace: str
    name: str
    data: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class TokenReview:
    """The TokenReview API's verdict on a bearer token (authentication.k8s.io/v1 `status`).

    `authenticated` False: the token is not valid (forged, expired, its pod gone, none of the
    audiences asked for); `error` may say why. Else `username` is who it belongs to
    ("system:serviceaccount:<namespace>:<name>"), `audiences` those of the review's it was issued
    for, and `extra` what the authenticator adds: for a pod-bound token on Kubernetes >= 1.30 the
    pod's node (`nodes.contract.EXTRA_NODE_NAME`)."""

    authenticated: bool
    username: str = ""
    groups: tuple[str, ...] = ()
    audiences: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)
    error: str = ""


ClusterItem = TypeVar("ClusterItem", ClusterNode, ClusterPod)
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class Listing(Generic[ClusterItem]):
    """A list as of one instant of the cluster: its items and the list's resourceVersion, from
    which a watch continues."""

    items: list[ClusterItem]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent(Generic[ClusterItem]):
    """One change since a resourceVersion. `key` is the node's name or the pod's "namespace/name";
    `item` is the object as it is now, None when it left the list (deleted, or a pod that
    finished or no longer asks for a GPU)."""

    type: EventType
    key: str
    item: ClusterItem | None
    resource_version: str


@dataclass(frozen=True)
class Changes(Generic[ClusterItem]):
    """What a watch saw: the events in order and the resourceVersion to watch from next."""

    events: list[WatchEvent[ClusterItem]]
    resource_version: str


@dataclass
class WorkloadSpec:
    """One Kubernetes Deployment that gpuplane creates, pinned to one node."""

    namespace: str
    name: str
    node_name: str | None  # None: leave the choice to the default scheduler
    image: str
    replicas: int = 1
    resources: dict[str, int] = field(default_factory=dict)  # limits, e.g. {"nvidia.com/gpu": 1}
    # CPU and memory quantities, e.g. {"cpu": "8", "memory": "64Gi"}: requests and limits alike.
    host_requests: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    priority_class_name: str = ""
    command: list[str] = field(default_factory=list)  # the container's entrypoint; []: the image's
    args: list[str] = field(default_factory=list)  # its arguments; []: the image's


class ClusterError(UpstreamFailure):
    """The cluster refused or failed an operation; the message says what and why (an API answers 502)."""


class EvictionBlocked(ClusterError):
    """The Eviction API answered 429: a PodDisruptionBudget forbids it now; retry later."""


class NotFound(ClusterError):
    pass


class Conflict(ClusterError):
    """HTTP 409 (AlreadyExists, or a write from a resourceVersion someone else changed since)."""


class ResourceVersionGone(ClusterError):
    """The API answered 410 Gone: the resourceVersion watched from is too old (compacted away);
    the caller must list again and watch from the new list's version."""


@runtime_checkable
class ClusterBackend(Protocol):
    def list_nodes(self) -> list[ClusterNode]: ...

    def list_gpu_pods(self) -> list[ClusterPod]:
        """Pods (all namespaces, not finished) that request an nvidia.com/gpu or nvidia.com/mig-*
        resource, and pods bound to a node that request CPU or memory there (``gpu_requests``
        empty): every pod's requests count against its node's CPU and memory."""
        ...

    def list_pdbs(self) -> list[ClusterPDB]:
        """PodDisruptionBudgets (policy/v1) of all namespaces."""
        ...

    def apply_pdb(self, pdb: ClusterPDB) -> None:
        """Create the PodDisruptionBudget, or give the one of that name its selector and budget."""
        ...

    def delete_pdb(self, namespace: str, name: str) -> None:
        """Delete the PodDisruptionBudget; one already gone is no error."""
        ...

    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Merge labels; a None value removes the label."""
        ...

    def cordon(self, node: str) -> None: ...

    def uncordon(self, node: str) -> None: ...

    def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the Eviction API; raises EvictionBlocked on 429."""
        ...

    def create_workload(self, spec: WorkloadSpec) -> None: ...

    def scale_workload(self, namespace: str, name: str, replicas: int) -> None: ...

    def delete_workload(self, namespace: str, name: str) -> None: ...

    def workload_ready(self, namespace: str, name: str) -> bool: ...

    def restart_device_plugin(self, node: str) -> None:
        """Delete the device plugin pod on a node so that it restarts and re-reads its config."""
        ...

    def read_configmap(self, namespace: str, name: str) -> ClusterConfigMap | None:
        """The ConfigMap as stored now (with its resourceVersion); None when there is none."""
        ...

    def write_configmap(self, configmap: ClusterConfigMap, *, dry_run: bool = False) -> None:
        """Create ``configmap`` (resource_version "") or replace the stored one it was read from.

        Conflict (409) when it exists already, or changed since it was read: read it again and
        merge. ``dry_run``: the API server checks and authorizes the write and stores nothing
        (``?dryRun=All``), which tells a preview whether the write would succeed.
        """
        ...

    def ensure_priority_class(self, name: str, value: int, description: str, *, preempts: bool = True) -> bool:
        """Make the cluster-scoped PriorityClass ``name`` have ``value`` and the preemption policy
        (PreemptLowerPriority, or Never when not ``preempts``): create it, or, when a stored one
        differs, delete and create it again (both fields are immutable; pods keep the priority
        they were admitted with). True when it changed anything."""
        ...

    def review_token(self, token: str, audiences: list[str]) -> TokenReview:
        """Ask the cluster whose bearer `token` is (the TokenReview API), for one of `audiences`.

        An invalid token is an answer (`authenticated` False), not an error; ClusterError when
        the cluster could not be asked.
        """
        ...



@runtime_checkable
class WatchableCluster(ClusterBackend, Protocol):
    """A backend that lists with resourceVersions and watches from one (Kubernetes' list-and-watch).

    Inventory sync uses it, when a backend offers it, to read only what changed since its last run.
    """

    @property
    def cluster_key(self) -> str:
        """Which cluster this is ("kubernetes:https://10.0.0.1:6443"): resourceVersions mean
        something only within one cluster."""
        ...

    def list_nodes_versioned(self) -> Listing[ClusterNode]: ...

    def list_gpu_pods_versioned(self) -> Listing[ClusterPod]:
        """`list_gpu_pods` with the list's resourceVersion."""
        ...

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Changes[ClusterNode]:
        """The node events after `resource_version`, waiting at most `timeout_s` for them;
        ResourceVersionGone when that version is too old."""
        ...

    def watch_gpu_pods(self, resource_version: str, timeout_s: float) -> Changes[ClusterPod]:
        """The events of the pods `list_gpu_pods` reads, after `resource_version`; as `watch_nodes`."""
        ...
