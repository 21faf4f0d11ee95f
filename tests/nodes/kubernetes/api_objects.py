"""The JSON shapes a real Kubernetes API server sends, for FakeKubeAPI to answer with.

A NodeList whose node carries the labels NVIDIA's GPU feature discovery writes, Pods with GPU and
MIG limits, Deployments and their scale subresource, and metav1.Status error bodies (the
Eviction API's 429 for a PodDisruptionBudget, 404 NotFound, 409 AlreadyExists).
"""
from __future__ import annotations

import base64
import json
from typing import Any

# --- Kubernetes JSON shapes ----------------------------------------------------------------
# Items inside a List carry no kind/apiVersion, as the API server sends them.

H100_GFD_LABELS = {
    "beta.kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "kubernetes.io/os": "linux",
    "node.kubernetes.io/instance-type": "p5.48xlarge",
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "54",
    "nvidia.com/cuda.driver.rev": "15",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4",
    "nvidia.com/gfd.timestamp": "1736496000",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "p5.48xlarge",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.mode": "compute",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/mps.capable": "false",
}


def _conditions(ready: bool) -> list[dict[str, str]]:
    stamp = "2025-01-10T08:00:00Z"
    pressure = [
        {"type": kind, "status": "False", "reason": reason, "message": message, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for kind, reason, message in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    ready_condition = (
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        if ready
        else {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}
    )
    return [*pressure, {**ready_condition, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]


def gpu_node(name: str = "gpu-node-1", *, ready: bool = True, unschedulable: bool = False) -> dict[str, Any]:
    """An 8x H100 node as the GPU operator leaves it: GFD labels, nvidia.com/gpu allocatable, a GPU taint."""
    spec: dict[str, Any] = {
        "podCIDR": "10.244.1.0/24",
        "podCIDRs": ["10.244.1.0/24"],
        "providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f67890",
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    }
    if unschedulable:
        spec["unschedulable"] = True
        spec["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2025-01-10T09:00:00Z"})
    return {
        "metadata": {
            "name": name,
            "uid": "7f3c1e2a-9b8d-4c6e-a1f0-1234567890ab",
            "resourceVersion": "184467",
            "creationTimestamp": "2025-01-10T07:58:12Z",
            "labels": {**H100_GFD_LABELS, "kubernetes.io/hostname": name},
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "nfd.node.kubernetes.io/feature-labels": "pci-10de.present",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": {
                "cpu": "192",
                "ephemeral-storage": "3905908736Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "2113442384Ki",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "allocatable": {
                "cpu": "191450m",
                "ephemeral-storage": "3599719203685",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "2102956624Ki",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "conditions": _conditions(ready),
            "addresses": [{"type": "InternalIP", "address": "10.0.12.34"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "5.15.0-1068-aws",
                "kubeletVersion": "v1.31.4",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
            },
        },
    }


def cpu_node(name: str = "cpu-node-1", *, ready: bool = False) -> dict[str, Any]:
    """A node without GPUs (no GFD labels, no nvidia.com/gpu), NotReady by default."""
    return {
        "metadata": {
            "name": name,
            "uid": "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f",
            "resourceVersion": "184470",
            "creationTimestamp": "2025-01-09T11:00:00Z",
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {"podCIDR": "10.244.2.0/24", "podCIDRs": ["10.244.2.0/24"]},
        "status": {
            "capacity": {"cpu": "16", "memory": "65842096Ki", "pods": "110"},
            "allocatable": {"cpu": "15890m", "memory": "65227696Ki", "pods": "110"},
            "conditions": _conditions(ready),
        },
    }


def list_object(kind: str, items: list[dict[str, Any]], continue_token: str = "", api_version: str = "v1") -> dict[str, Any]:
    """A `<kind>List` page; a non-empty `continue_token` tells the client more pages follow."""
    metadata: dict[str, Any] = {"resourceVersion": "184500"}
    if continue_token:
        metadata["continue"] = continue_token
        metadata["remainingItemCount"] = 1
    return {"kind": f"{kind}List", "apiVersion": api_version, "metadata": metadata, "items": items}


def pod(
    name: str,
    namespace: str = "ml",
    *,
    node_name: str = "gpu-node-1",
    limits: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    owner_kind: str = "ReplicaSet",
    owner_name: str = "llama-7c9d8f6b5",
    priority_class_name: str = "",
    phase: str = "Running",
    ready: bool = True,
) -> dict[str, Any]:
    """A scheduled Pod whose one container has `limits` (requests mirror limits, as for extended resources)."""
    limits = dict(limits or {})
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "vllm/vllm-openai:v0.6.4",
                "resources": {"limits": limits, "requests": dict(limits)},
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "nodeName": node_name,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
        "priority": 0,
    }
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
        spec["priority"] = 1000000
    stamp = "2025-01-10T09:12:00Z"
    return {
        "metadata": {
            "name": name,
            "generateName": f"{owner_name}-",
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "185001",
            "creationTimestamp": stamp,
            "labels": dict(labels or {"app.kubernetes.io/name": "llama", "pod-template-hash": "7c9d8f6b5"}),
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": owner_kind, "name": owner_name, "uid": f"uid-{owner_name}", "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
                {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
                {"type": "ContainersReady", "status": "True" if ready else "False", "lastTransitionTime": stamp},
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": stamp},
            ],
            "hostIP": "10.0.12.34",
            "podIP": "10.244.1.17",
            "startTime": stamp,
            "qosClass": "BestEffort",
        },
    }


def device_plugin_pod(node: str, name: str = "nvidia-device-plugin-daemonset-x7k2p") -> dict[str, Any]:
    """The GPU operator's device plugin pod on `node` (a DaemonSet pod, no GPU limits)."""
    return pod(
        name,
        "gpu-operator",
        node_name=node,
        labels={"app": "nvidia-device-plugin-daemonset", "controller-revision-hash": "6f8d5b7c9", "pod-template-generation": "1"},
        owner_kind="DaemonSet",
        owner_name="nvidia-device-plugin-daemonset",
        priority_class_name="system-node-critical",
    )


def status_error(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A metav1.Status failure body, as the API server sends with every error response."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return body


def eviction_blocked(pdb_name: str = "llama-pdb", desired_healthy: int = 2, current_healthy: int = 2) -> dict[str, Any]:
    """The Eviction API's 429 when a PodDisruptionBudget allows no disruption (pkg/registry/core/pod/storage/eviction.go)."""
    return status_error(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {pdb_name} needs {desired_healthy} healthy pods and has {current_healthy} currently",
                }
            ],
            "retryAfterSeconds": 10,
        },
    )


def not_found(resource: str, name: str, group: str = "") -> dict[str, Any]:
    """404 for a named object, e.g. not_found("deployments", "llama", "apps")."""
    qualified = f"{resource}.{group}" if group else resource
    details = {"name": name, "kind": resource, **({"group": group} if group else {})}
    return status_error(404, "NotFound", f'{qualified} "{name}" not found', details)


def already_exists(resource: str, name: str, group: str = "") -> dict[str, Any]:
    """409 for a create whose name is taken."""
    qualified = f"{resource}.{group}" if group else resource
    details = {"name": name, "kind": resource, **({"group": group} if group else {})}
    return status_error(409, "AlreadyExists", f'{qualified} "{name}" already exists', details)


def eviction_accepted() -> dict[str, Any]:
    """The Eviction API's 201 answer."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def deployment(
    manifest: dict[str, Any],
    *,
    generation: int = 1,
    observed_generation: int | None = None,
    ready_replicas: int | None = None,
) -> dict[str, Any]:
    """A Deployment object as the API server returns it for `manifest`, with server fields and status."""
    replicas = manifest["spec"].get("replicas", 1)
    status: dict[str, Any] = {}
    if observed_generation is not None:
        status = {"observedGeneration": observed_generation, "replicas": replicas, "updatedReplicas": replicas}
        if ready_replicas:
            status.update(readyReplicas=ready_replicas, availableReplicas=ready_replicas)
        else:
            status["unavailableReplicas"] = replicas
    return {
        **manifest,
        "metadata": {
            **manifest["metadata"],
            "uid": "5d2b8a7e-1c3f-4e6a-9b0d-abcdef012345",
            "resourceVersion": "186000",
            "generation": generation,
            "creationTimestamp": "2025-01-10T10:00:00Z",
        },
        "spec": {
            "progressDeadlineSeconds": 600,
            "revisionHistoryLimit": 10,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            **manifest["spec"],
        },
        "status": status,
    }


def scale(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    """The autoscaling/v1 Scale subresource of a Deployment."""
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": name, "namespace": namespace, "uid": "5d2b8a7e-1c3f-4e6a-9b0d-abcdef012345", "resourceVersion": "186010"},
        "spec": {"replicas": replicas},
        "status": {"replicas": 1, "selector": f"app.kubernetes.io/name={name}"},
    }


def service_account_jwt(exp: float, **claims: Any) -> str:
    """A token shaped like a projected ServiceAccount token (a JWS: header.claims.signature); only the
    cluster can tell whether it is valid, so its signature here is a stand-in."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'kid': 'test'})}.{part({'exp': int(exp), **claims})}.c2lnbmF0dXJl"


def token_review(token: str, *, user: str = "system:serviceaccount:gpuplane:gpuplane-agent", node: str | None = "gpu-node-1",
                 audiences: tuple[str, ...] = ("gpuplane",), authenticated: bool = True, error: str = "") -> dict[str, Any]:
    """The API server's answer to a TokenReview of `token`: a pod-bound ServiceAccount token's user,
    with the pod's node in `extra` (Kubernetes >= 1.30) unless `node` is None."""
    review: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                              "metadata": {"creationTimestamp": None}, "spec": {"token": token}}
    if not authenticated:
        review["status"] = {"user": {}, "error": error or "invalid bearer token"}
        return review
    extra = {"authentication.kubernetes.io/credential-id": ["JTI=7ee52be0-9045-4653-aa5e-0da57b8dccdc"],
             "authentication.kubernetes.io/pod-name": ["gpuplane-agent-x7k2p"],
             "authentication.kubernetes.io/pod-uid": ["e87dbbd6-3d7e-45db-aafb-72b24627dff5"]}
    if node is not None:
        extra |= {"authentication.kubernetes.io/node-name": [node],
                  "authentication.kubernetes.io/node-uid": ["497e9d9a-47aa-4930-b0f6-9f2fb574c8c6"]}
    namespace = user.split(":")[2] if user.count(":") == 3 else "default"
    review["status"] = {"authenticated": True, "audiences": list(audiences), "user": {
        "username": user, "uid": "5a1f9c2d-7e33-4a88-b2c4-6f9d0e1a3b57", "extra": extra,
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]}}
    return review
