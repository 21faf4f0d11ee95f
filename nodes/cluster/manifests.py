"""What both backends submit: WorkloadSpec -> a Kubernetes Deployment, ClusterConfigMap -> a ConfigMap."""
from __future__ import annotations

from typing import Any

from nodes.cluster.base import ClusterConfigMap, ClusterPDB, WorkloadSpec
from nodes.contract import LABEL_APP_NAME, LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE


def deployment_manifest(spec: WorkloadSpec) -> dict[str, Any]:
    """An apps/v1 Deployment for `spec`.

    When `spec.node_name` is set the pods are pinned with a *required* node affinity on
    kubernetes.io/hostname (not nodeName), so the default scheduler still runs its own checks and
    a pod that cannot fit stays Pending with an event instead of failing admission.
    """
    labels = {LABEL_MANAGED_BY: "gpuplane", **spec.labels}
    selector = {LABEL_APP_NAME: spec.name}
    pod_labels = {**labels, **selector}
    limits = {**spec.host_requests, **{key: str(value) for key, value in spec.resources.items()}}
    resources: dict[str, Any] = {"limits": limits}
    if spec.host_requests:  # the same requests: the kubelet's and kube-scheduler's view of the pod
        resources["requests"] = dict(spec.host_requests)
    container: dict[str, Any] = {
        "name": "main",
        "image": spec.image,
        "resources": resources,
        "env": [{"name": key, "value": value} for key, value in sorted(spec.env.items())],
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    pod_spec: dict[str, Any] = {"containers": [container]}
    if spec.priority_class_name:
        pod_spec["priorityClassName"] = spec.priority_class_name
    if spec.node_name:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [spec.node_name]}]}
                    ]
                }
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels, "annotations": dict(spec.annotations)},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": dict(spec.annotations)},
                "spec": pod_spec,
            },
        },
    }


def configmap_manifest(configmap: ClusterConfigMap) -> dict[str, Any]:
    """A v1 ConfigMap for `configmap`; with its resourceVersion when it replaces a stored one, so
    the API server refuses the write (409) if someone changed it since it was read."""
    metadata: dict[str, Any] = {"name": configmap.name, "namespace": configmap.namespace,
                                "labels": dict(configmap.labels)}
    if configmap.resource_version:
        metadata["resourceVersion"] = configmap.resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(configmap.data)}


def pinned_node(manifest: dict[str, Any]) -> str | None:
    """The node a Deployment manifest is pinned to by required hostname affinity, if any."""
    try:
        terms = manifest["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
    except KeyError:
        return None
    for term in terms:
        for expr in term.get("matchExpressions", []):
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("operator") == "In" and expr.get("values"):
                return expr["values"][0]
    return None


def pdb_manifest(pdb: ClusterPDB) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget for `pdb`: its matchLabels and the budget it states."""
    budget = ({"minAvailable": pdb.min_available} if pdb.min_available is not None
              else {"maxUnavailable": pdb.max_unavailable})
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": pdb.name, "namespace": pdb.namespace},
        "spec": {"selector": {"matchLabels": dict(pdb.match_labels)}, **budget},
    }


def priority_class_manifest(name: str, value: int, description: str, *, preempts: bool) -> dict[str, Any]:
    """A scheduling.k8s.io/v1 PriorityClass, labelled as gpuplane's."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE}},
            "value": value, "globalDefault": False, "description": description,
            "preemptionPolicy": "PreemptLowerPriority" if preempts else "Never"}
