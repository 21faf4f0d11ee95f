"""Kubernetes workloads in the simulator: apps/v1 Deployments and the ReplicaSet controller behind them.

A Deployment is stored as `nodes.cluster.manifests.deployment_manifest` renders it; applying it
again updates it, and a changed pod template replaces all of its pods (the Recreate strategy).
The ReplicaSet controller keeps exactly spec.replicas pods, recreating a deleted or evicted pod
under a new name and scaling down the way Kubernetes ranks pods; the Deployment's status counts
its ready pods. Every pod they remove is an event in the record (`objects.remove_pod`).
"""
from __future__ import annotations

import copy
import json

from nodes.cluster.base import ClusterError, WorkloadSpec
from nodes.cluster.manifests import deployment_manifest
from nodes.cluster.sim.indexes import indexes
from nodes.cluster.sim.objects import (
    REMOVED_BY_CONTROLLER,
    REMOVED_WITH_OWNER,
    add_pod,
    deployment_pods,
    find_deployment,
    hash_name,
    is_ready,
    remove_pod,
    timestamp,
)
from nodes.cluster.sim.store import State
from nodes.contract import LABEL_POD_TEMPLATE_HASH


def apply_deployment(state: State, spec: WorkloadSpec, now: float) -> None:
    """Store the Deployment for `spec`, like `kubectl apply`; ClusterError when replicas < 0.

    An existing one keeps its creationTimestamp and gets the next generation; when its pod
    template changes, all its pods are deleted (the controller creates new ones).
    """
    if spec.replicas < 0:
        raise ClusterError(f"spec.replicas of deployment {spec.name} must be >= 0, not {spec.replicas}")
    manifest = deployment_manifest(spec)
    key = f"{spec.namespace}/{spec.name}"
    existing = state["deployments"].get(key)
    manifest["metadata"]["creationTimestamp"] = timestamp(now)
    manifest["metadata"]["generation"] = 1
    if existing is not None:
        manifest["metadata"]["creationTimestamp"] = existing["metadata"]["creationTimestamp"]
        manifest["metadata"]["generation"] = existing["metadata"].get("generation", 1) + 1
        if existing["spec"]["template"] != manifest["spec"]["template"]:
            for pod_key in deployment_pods(state, key):
                remove_pod(state, now, pod_key, REMOVED_BY_CONTROLLER, f"deployment {key}: pod template replaced")
    state["deployments"][key] = manifest


def scale_deployment(state: State, namespace: str, name: str, replicas: int) -> None:
    """Set spec.replicas; NotFound for an unknown Deployment, ClusterError when replicas < 0."""
    deployment = find_deployment(state, namespace, name)
    if replicas < 0:
        raise ClusterError(f"spec.replicas of deployment {name} must be >= 0, not {replicas}")
    deployment["spec"]["replicas"] = replicas
    deployment["metadata"]["generation"] = deployment["metadata"].get("generation", 1) + 1


def delete_deployment(state: State, namespace: str, name: str, now: float) -> None:
    """Delete the Deployment and, as the garbage collector does, its pods; NotFound when there is none."""
    find_deployment(state, namespace, name)
    key = f"{namespace}/{name}"
    for pod_key in deployment_pods(state, key):
        remove_pod(state, now, pod_key, REMOVED_WITH_OWNER, f"deployment {key} deleted")
    del state["deployments"][key]


def deployment_ready(state: State, namespace: str, name: str) -> bool:
    """True when as many pods of the Deployment are Ready as it has replicas; NotFound when there is none."""
    deployment = find_deployment(state, namespace, name)
    pods = deployment_pods(state, f"{namespace}/{name}")
    ready = sum(1 for key in pods if is_ready(state["pods"].peek(key)))
    return ready >= deployment["spec"]["replicas"]


def reconcile_deployments(state: State, now: float) -> None:
    """One pass of the ReplicaSet controller over every Deployment that may need it, by key."""
    for key in _changed_deployments(state):
        _reconcile(state, key, deployment_pods(state, key), now)


def update_deployment_status(state: State) -> None:
    """Write each Deployment's status: its pods, and how many of them are ready."""
    members = indexes(state).by_deployment
    pods = state["pods"]
    for key in _changed_deployments(state):
        deployment = state["deployments"].peek(key)
        keys = members.get(key, ())
        ready = sum(1 for k in keys if is_ready(pods.peek(k)))
        status = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": len(keys),
            "updatedReplicas": len(keys),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        # Hand out (and so rewrite) only the Deployments whose status moved.
        if deployment.get("status") != status:
            state["deployments"][key]["status"] = status


def _changed_deployments(state: State) -> list[str]:
    """Keys of the stored Deployments handed out, or whose pods were, in this transaction (`indexes`)."""
    deployments = state["deployments"]
    return sorted(key for key in indexes(state).changed_deployments if key in deployments)


def _reconcile(state: State, key: str, pods: list[str], now: float) -> None:
    """Keep exactly spec.replicas pods (`pods`, its pod keys) of the Deployment `key`."""
    deployment = state["deployments"].peek(key)
    wanted = deployment["spec"]["replicas"]
    pods = list(pods)
    # Failed pods still count: the real controller would replace them, and a pod the device
    # plugin rejects would then be recreated and rejected forever.
    while len(pods) < wanted:
        pods.append(_create_pod(state, key, now))
    if len(pods) > wanted:
        # Scale down the way the ReplicaSet controller ranks pods: unscheduled, then not
        # ready, then the newest first.
        def rank(pod_key: str) -> tuple[int, int, int]:
            pod = state["pods"].peek(pod_key)
            return (
                1 if pod["spec"].get("nodeName") else 0,
                1 if is_ready(pod) else 0,
                -state["sim"]["pods"].peek(pod_key)["seq"],
            )

        for pod_key in sorted(pods, key=rank)[: len(pods) - wanted]:
            remove_pod(state, now, pod_key, REMOVED_BY_CONTROLLER, f"deployment {key} scaled down to {wanted}")


def _create_pod(state: State, key: str, now: float) -> str:
    """Create a Pending pod from the Deployment's template, named <deployment>-<template hash>-<suffix>."""
    deployment = state["deployments"].peek(key)
    namespace, name = key.split("/", 1)
    template = deployment["spec"]["template"]
    template_hash = hash_name(json.dumps(template, sort_keys=True), 10)
    replica_set = f"{name}-{template_hash}"
    state["counter"] += 1
    pod_name = f"{replica_set}-{hash_name(key + '/' + str(state['counter']), 5)}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": namespace,
            "labels": {**template["metadata"].get("labels", {}), LABEL_POD_TEMPLATE_HASH: template_hash},
            "annotations": dict(template["metadata"].get("annotations", {})),
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set, "controller": True}
            ],
            "creationTimestamp": timestamp(now),
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Pending", "conditions": []},
    }
    pod_key = f"{namespace}/{pod_name}"
    add_pod(state, pod_key, pod, deployment=key)
    return pod_key
