"""What a simulated cluster holds before gpuplane acts: GPU nodes, other teams' pods, their health.

The demo and the tests build clusters from these: a Ready GPU node as the installer, GFD and the
device plugin leave it, a pod someone else created (already bound and Running), a kubelet that
stops posting status, a pod that fails its readiness probe.
"""
from __future__ import annotations

from typing import Any

from nodes.cluster.base import ClusterError, NotFound
from nodes.cluster.sim.device_plugin import discovered_labels, install_device_plugin
from nodes.cluster.sim.gpus import gpu_uuid
from nodes.cluster.sim.mig_manager import start_reconfiguration
from nodes.cluster.sim.objects import add_pod, find_node, mark_running, phase, set_condition, timestamp
from nodes.cluster.sim.replica_sets import OWNER_KIND, adopt_pod
from nodes.cluster.sim.store import State
from nodes.contract import (
    ANNOTATION_ASSIGNED_GPUS,
    ANNOTATION_GPU_UUIDS,
    ANNOTATION_MIG_START,
    ANNOTATION_SHARE_MILLI,
    LABEL_HOSTNAME,
    LABEL_MIG_CONFIG,
    LABEL_OS,
)


def add_gpu_node(
    state: State,
    now: float,
    name: str,
    *,
    product: str,
    gpu_count: int,
    gpu_memory_mib: int,
    cpu_milli: int,
    memory_mib: int,
    labels: dict[str, str] | None,
    taints: list[dict[str, Any]] | None,
    mig_reconfigure_s: float = 0.0,
    plugin_restart_s: float = 0.0,
) -> None:
    """Add a Ready GPU node with `gpu_count` GPUs of `product`, as GFD and the device plugin publish it.

    `labels` are merged over GFD's; a `nvidia.com/device-plugin.config` label is read by the
    plugin as it starts, a `nvidia.com/mig.config` one starts the MIG manager (done
    `mig_reconfigure_s` later, the plugin back `plugin_restart_s` after that). Annotation
    `gpuplane.io/gpu-uuids` holds `gpu_uuid(name, i)` per GPU, as the node agent would write it.
    Raises ClusterError when the node exists or the plugin cannot run the config its label names.
    """
    if name in state["nodes"]:
        raise ClusterError(f'nodes "{name}" already exists')
    node_labels = {
        LABEL_HOSTNAME: name,
        LABEL_OS: "linux",
        **discovered_labels(product, gpu_count, gpu_memory_mib),
        **{key: str(value) for key, value in (labels or {}).items()},
    }
    base_resources = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": "110"}
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {ANNOTATION_GPU_UUIDS: ",".join(gpu_uuid(name, i) for i in range(gpu_count))},
            "creationTimestamp": timestamp(now),
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": dict(base_resources),
            "allocatable": dict(base_resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastTransitionTime": timestamp(now),
                }
            ],
        },
    }
    state["nodes"][name] = obj
    install_device_plugin(state, name, product, now)
    if node_labels.get(LABEL_MIG_CONFIG):
        start_reconfiguration(state, name, node_labels[LABEL_MIG_CONFIG], now, reconfigure_s=mig_reconfigure_s,
                              plugin_restart_s=plugin_restart_s)


def set_node_ready(state: State, now: float, name: str, ready: bool) -> None:
    """Flip the node's Ready condition (a kubelet that stops or resumes posting status); NotFound for an unknown node."""
    for condition in find_node(state, name)["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(
                status="True" if ready else "Unknown",
                reason="KubeletReady" if ready else "NodeStatusUnknown",
                lastTransitionTime=timestamp(now),
            )


def run_pod(
    state: State,
    now: float,
    namespace: str,
    name: str,
    node: str,
    *,
    resources: dict[str, int],
    gpus: list[int] | None,
    share_milli: int | None,
    mig_start: int | None,
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
    ready: bool,
    owner_kind: str,
) -> None:
    """Add a pod someone else created, already bound to `node` and Running (Ready when `ready`).

    `gpus`, `share_milli` and `mig_start` become the gpuplane.io/gpus ("0,1"), share-milli and
    mig-start annotations; `owner_kind` ("DaemonSet", ...) gives it an owner reference; a
    "ReplicaSet" owner recreates it after an eviction or deletion (`replica_sets`). No
    capacity check: the pod is already there. Raises NotFound for an unknown node, ClusterError
    when the pod exists.
    """
    find_node(state, node)
    key = f"{namespace}/{name}"
    if key in state["pods"]:
        raise ClusterError(f'pods "{name}" already exists in namespace {namespace}')
    pod_annotations = dict(annotations or {})
    if gpus is not None:
        pod_annotations[ANNOTATION_ASSIGNED_GPUS] = ",".join(str(i) for i in gpus)
    if share_milli is not None:
        pod_annotations[ANNOTATION_SHARE_MILLI] = str(share_milli)
    if mig_start is not None:
        pod_annotations[ANNOTATION_MIG_START] = str(mig_start)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "annotations": pod_annotations,
        "creationTimestamp": timestamp(now),
    }
    if owner_kind:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner", "controller": True}
        ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "image": "unknown", "resources": {"limits": {k: str(v) for k, v in resources.items()}}}
            ],
        },
        "status": {"phase": "Pending", "conditions": []},
    }
    add_pod(state, key, pod, deployment=None)
    mark_running(pod, now, ready=ready)
    if owner_kind == OWNER_KIND:
        # Its ReplicaSet recreates it once it is evicted or deleted (`replica_sets`).
        adopt_pod(state, key)


def set_pod_ready(state: State, now: float, namespace: str, name: str, ready: bool) -> None:
    """Make a Running pod pass or fail its readiness probe; NotFound for an unknown pod, ClusterError when not Running."""
    pod = state["pods"].get(f"{namespace}/{name}")
    if pod is None:
        raise NotFound(f'pods "{name}" not found in namespace {namespace}')
    if phase(pod) != "Running":
        raise ClusterError(f"pod {namespace}/{name} is {phase(pod)}, not Running")
    set_condition(pod, "Ready", ready, now)
    set_condition(pod, "ContainersReady", ready, now)
