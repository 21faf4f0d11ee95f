"""The ClusterBackend protocol and the plain value types it speaks.

Both backends read Kubernetes-shaped objects (Node, Pod JSON) and turn them into these types
through one parser (`nodes.cluster.parsing`), so the simulated cluster exercises exactly the
label and resource interpretation that a real cluster gets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from nodes.vocabulary import Taint


@dataclass(frozen=True)
class MIGDevice:
    profile: str  # e.g. "3g.40gb"
    start: int  # placement start in memory slices (0..7)
    size: int  # placement size in memory slices
    uuid: str = ""


@dataclass(frozen=True)
class GPUDevice:
    index: int
    uuid: str
    product: str
    memory_mib: int
    mig_enabled: bool = False
    mig_devices: tuple[MIGDevice, ...] = ()


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


@dataclass(frozen=True)
class ClusterPod:
    namespace: str
    name: str
    node_name: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool
    labels: dict[str, str]
    annotations: dict[str, str]
    gpu_requests: dict[str, int]  # e.g. {"nvidia.com/gpu": 1} or {"nvidia.com/mig-3g.40gb": 1}
    priority_class_name: str = ""
    owner_kind: str = ""  # "DaemonSet", "ReplicaSet", ... ("" for a bare pod)

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


@dataclass
class WorkloadSpec:
    """One Kubernetes Deployment that gpuplane creates, pinned to one node."""

    namespace: str
    name: str
    node_name: str | None  # None: leave the choice to the default scheduler
    image: str
    replicas: int = 1
    resources: dict[str, int] = field(default_factory=dict)  # limits, e.g. {"nvidia.com/gpu": 1}
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    priority_class_name: str = ""
    command: list[str] = field(default_factory=list)


class ClusterError(Exception):
    """The cluster refused or failed an operation; the message says what and why."""


class EvictionBlocked(ClusterError):
    """The Eviction API answered 429: a PodDisruptionBudget forbids it now; retry later."""


class NotFound(ClusterError):
    pass


@runtime_checkable
class ClusterBackend(Protocol):
    def list_nodes(self) -> list[ClusterNode]: ...

    def list_gpu_pods(self) -> list[ClusterPod]:
        """Pods (all namespaces) that request an nvidia.com/gpu or nvidia.com/mig-* resource."""
        ...

    def list_pdbs(self) -> list[ClusterPDB]:
        """PodDisruptionBudgets (policy/v1) of all namespaces."""
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

