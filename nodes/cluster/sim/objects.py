"""Kubernetes objects in the simulator's state: lookups, pod bookkeeping, conditions, events, names.

What the API server and client libraries give every component of a real cluster, here shared by
the simulated scheduler, controllers, device plugin and fixtures: finding an object (or the API's
NotFound), adding and deleting pods, pod phase and conditions, events, and generated names, which
are derived by hashing, never drawn at random, so runs are reproducible.
"""
from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from nodes.cluster.base import NotFound
from nodes.cluster.sim.indexes import indexes
from nodes.cluster.sim.store import State

TERMINAL_PHASES = ("Succeeded", "Failed")
MAX_EVENTS = 200

# How a pod left, the reason of the event `remove_pod` records: through the Eviction API, a
# client's own DELETE of the pod, its ReplicaSet controller (scale-down, a replaced template), or
# the garbage collector after its Deployment was deleted. Tests tell a drain (evictions only)
# from a control plane that kills pods by looking at these.
REMOVED_EVICTED = "Evicted"
REMOVED_DELETED = "Deleted"
REMOVED_BY_CONTROLLER = "SuccessfulDelete"
REMOVED_WITH_OWNER = "GarbageCollected"
REMOVAL_REASONS = (REMOVED_EVICTED, REMOVED_DELETED, REMOVED_BY_CONTROLLER, REMOVED_WITH_OWNER)
# Kubernetes' alphabet for generated name suffixes (no vowels, no look-alike characters).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def timestamp(now: float) -> str:
    """`now` (seconds since the epoch) as a Kubernetes timestamp, "2024-01-01T00:00:00Z"."""
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hash_name(seed: str, length: int) -> str:
    """A deterministic name suffix of `length` characters in Kubernetes' alphabet."""
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(_NAME_ALPHABET))
        chars.append(_NAME_ALPHABET[digit])
    return "".join(chars)


# --- lookups ---------------------------------------------------------------------------------------


def find_node(state: State, name: str) -> dict[str, Any]:
    """The stored Node `name`; NotFound with the API server's message when there is none."""
    node = state["nodes"].get(name)
    if node is None:
        raise NotFound(f'nodes "{name}" not found')
    return node


def find_deployment(state: State, namespace: str, name: str) -> dict[str, Any]:
    """The stored apps/v1 Deployment; NotFound with the API server's message when there is none."""
    deployment = state["deployments"].get(f"{namespace}/{name}")
    if deployment is None:
        raise NotFound(f'deployments.apps "{name}" not found in namespace {namespace}')
    return deployment


def deployment_pods(state: State, key: str) -> list[str]:
    """Keys of the pods of the Deployment `key` ("namespace/name"), oldest first."""
    sim_pods = state["sim"]["pods"]
    return sorted(indexes(state).by_deployment.get(key, ()), key=lambda pod_key: sim_pods.peek(pod_key)["seq"])


def pods_on_node(state: State, node: str) -> list[str]:
    """Keys of the pods bound to `node`, oldest first."""
    sim_pods = state["sim"]["pods"]
    return sorted(indexes(state).by_node.get(node, ()), key=lambda pod_key: sim_pods.peek(pod_key)["seq"])


# --- pods ------------------------------------------------------------------------------------------


def add_pod(state: State, key: str, pod: dict[str, Any], *, deployment: str | None) -> None:
    """Store `pod` under `key` with its bookkeeping: creation order and owning Deployment key, if any."""
    state["counter"] += 1
    state["pods"][key] = pod
    state["sim"]["pods"][key] = {"seq": state["counter"], "deployment": deployment, "bound_at": None}


def delete_pod(state: State, key: str) -> None:
    """Remove the pod `key` and its bookkeeping, recording nothing; nothing happens when it is gone already.

    For pods that leave without an event of their own (the device plugin's, on a restart that
    records one); every other removal goes through `remove_pod`.
    """
    state["pods"].pop(key, None)
    state["sim"]["pods"].pop(key, None)


def remove_pod(state: State, now: float, key: str, reason: str, message: str) -> None:
    """Remove the pod `key` and record how (`reason`, one of REMOVAL_REASONS) in the event record.

    The event also says whether the pod was Ready when it went (`"ready"`), so a test can prove
    that no serving pod was ever killed any other way than by an eviction.
    """
    pod = state["pods"].get(key)
    if pod is None:
        return
    ready = is_ready(pod)
    delete_pod(state, key)
    record_event(state, now, "Pod", key, "Normal", reason, message, ready=ready)


def phase(pod: dict[str, Any]) -> str:
    """The pod's status.phase ("Pending" until the kubelet reports one)."""
    return pod.get("status", {}).get("phase", "Pending")


def is_ready(pod: dict[str, Any]) -> bool:
    """True when the pod is Running with condition Ready=True."""
    return phase(pod) == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def owner_kind(pod: dict[str, Any]) -> str:
    """Kind of the pod's first owner ("ReplicaSet", "DaemonSet", ...), "" for a bare pod."""
    owners = pod["metadata"].get("ownerReferences") or []
    return owners[0].get("kind", "") if owners else ""


def owner_name(pod: dict[str, Any]) -> str:
    """Name of the pod's first owner, "" for a bare pod."""
    owners = pod["metadata"].get("ownerReferences") or []
    return owners[0].get("name", "") if owners else ""


def set_condition(
    pod: dict[str, Any], kind: str, status: bool, now: float, *, reason: str = "", message: str = ""
) -> None:
    """Set the pod condition `kind`; its lastTransitionTime moves only when the status changes."""
    conditions = pod["status"].setdefault("conditions", [])
    condition = next((c for c in conditions if c["type"] == kind), None)
    value = "True" if status else "False"
    if condition is None:
        condition = {"type": kind, "status": value, "lastTransitionTime": timestamp(now)}
        conditions.append(condition)
    elif condition["status"] != value:
        condition.update(status=value, lastTransitionTime=timestamp(now))
    for field, text in (("reason", reason), ("message", message)):
        if text:
            condition[field] = text
        else:
            condition.pop(field, None)


def mark_running(pod: dict[str, Any], now: float, *, ready: bool) -> None:
    """Kubelet started the containers: Running, Ready as its probe says."""
    pod["status"]["phase"] = "Running"
    pod["status"]["startTime"] = timestamp(now)
    for kind in ("PodScheduled", "Initialized"):
        set_condition(pod, kind, True, now)
    set_condition(pod, "ContainersReady", ready, now)
    set_condition(pod, "Ready", ready, now)


# --- events ----------------------------------------------------------------------------------------


def record_event(
    state: State, now: float, kind: str, name: str, type_: str, reason: str, message: str, **details: Any
) -> None:
    """Append an event about object `kind`/`name` (type Normal or Warning), with `details` as extra
    fields; only the latest MAX_EVENTS are kept."""
    state["events"].append(
        {"time": timestamp(now), "kind": kind, "name": name, "type": type_, "reason": reason, "message": message,
         **details}
    )
    del state["events"][:-MAX_EVENTS]
