"""ReplicaSets the simulator did not create for a Deployment: other teams' pods, kept alive.

A pod someone else created with a ReplicaSet owner (`fixtures.run_pod(..., owner_kind="ReplicaSet")`)
registers that ReplicaSet here with the pod as its template, one replica. As Kubernetes' ReplicaSet
controller does, each pass recreates the pods it is missing (an evicted or deleted pod comes back
under a new name, Pending and unbound, for the default scheduler to place where it fits; or it stays
Pending with the scheduler's message). The template is the pod as it was created: its resources,
labels, annotations and the rest of its spec, without the node it was bound to (a required node
affinity in the spec still pins it) and without the annotations that record the devices it was
given on that node (`gpuplane.io/gpus`, `gpuplane.io/mig-start`): the replacement gets its own.
Failed pods still count, as in `workloads`. Only Deployments' ReplicaSets live in `workloads`.
"""
from __future__ import annotations

import copy

from nodes.cluster.sim.indexes import indexes
from nodes.cluster.sim.objects import add_pod, hash_name, owner_name, timestamp
from nodes.cluster.sim.store import Collection, State
from nodes.contract import ANNOTATION_ASSIGNED_GPUS, ANNOTATION_MIG_START

OWNER_KIND = "ReplicaSet"
# Annotations about where a pod's devices are on its node: the pod's, not its ReplicaSet's template.
_DEVICE_ANNOTATIONS = (ANNOTATION_ASSIGNED_GPUS, ANNOTATION_MIG_START)


def _replica_sets(state: State) -> Collection:
    result: Collection = state["sim"]["replica_sets"]
    return result


def adopt_pod(state: State, pod_key: str) -> None:
    """Register the ReplicaSet that owns the stored pod `pod_key`, the pod as its template (one more
    replica when the ReplicaSet is known already)."""
    pod = state["pods"][pod_key]
    namespace = pod["metadata"]["namespace"]
    key = f"{namespace}/{owner_name(pod)}"
    replica_sets = _replica_sets(state)
    if key in replica_sets:
        replica_sets[key]["replicas"] += 1
        return
    metadata = pod["metadata"]
    spec = copy.deepcopy(pod["spec"])
    spec.pop("nodeName", None)
    replica_sets[key] = {
        "replicas": 1,
        "template": {
            "metadata": {
                "labels": dict(metadata.get("labels") or {}),
                "annotations": {k: v for k, v in (metadata.get("annotations") or {}).items()
                                if k not in _DEVICE_ANNOTATIONS},
            },
            "spec": spec,
        },
    }


def reconcile_replica_sets(state: State, now: float) -> None:
    """One pass of the ReplicaSet controller over the registered ReplicaSets: create the missing pods."""
    replica_sets = _replica_sets(state)
    if not replica_sets:
        return
    owned = indexes(state).replica_set_pods
    for key in sorted(replica_sets):
        for _ in range(replica_sets.peek(key)["replicas"] - owned.get(key, 0)):
            _create_pod(state, key, now)


def _create_pod(state: State, key: str, now: float) -> str:
    """A Pending, unbound pod from the ReplicaSet's template, named <replica set>-<suffix>."""
    namespace, name = key.split("/", 1)
    template = state["sim"]["replica_sets"].peek(key)["template"]
    state["counter"] += 1
    pod_name = f"{name}-{hash_name(key + '/' + str(state['counter']), 5)}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": namespace,
            "labels": dict(template["metadata"]["labels"]),
            "annotations": dict(template["metadata"]["annotations"]),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": OWNER_KIND, "name": name, "controller": True}],
            "creationTimestamp": timestamp(now),
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Pending", "conditions": []},
    }
    pod_key = f"{namespace}/{pod_name}"
    add_pod(state, pod_key, pod, deployment=None)
    return pod_key
