"""Kubernetes scheduling in the simulator: the default scheduler, kubelet admission and readiness, cordon.

- The scheduler binds each Pending, unbound pod (oldest first) to the first node, by name, that
  matches its required hostname affinity, is Ready and schedulable, has no untolerated
  NoSchedule/NoExecute taint and has the extended resources, CPU and memory it asks for free
  (allocatable minus what its bound, unfinished pods request, as NodeResourcesFit counts them).
  A pod that fits nowhere stays Pending with the scheduler's "0/N nodes are available: ..."
  message on its PodScheduled condition ("Insufficient cpu").
- The kubelet admits a bound pod only when the device plugin can allocate its GPUs, and makes it
  Running and Ready a fixed delay after binding.
- Cordon marks a node unschedulable and taints it, as `kubectl cordon` and the node lifecycle
  controller do; uncordon undoes both.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

from nodes.cluster.manifests import pinned_node
from nodes.cluster.parsing import parse_quantity, pod_host_requests
from nodes.cluster.sim.device_plugin import allocation_refusal
from nodes.cluster.sim.indexes import indexes
from nodes.cluster.sim.objects import (
    TERMINAL_PHASES,
    find_node,
    mark_running,
    phase,
    pods_on_node,
    record_event,
    set_condition,
    timestamp,
)
from nodes.cluster.sim.store import State
from nodes.contract import TAINT_UNSCHEDULABLE


def cordon(state: State, node: str, now: float) -> None:
    """Mark `node` unschedulable and add the unschedulable NoSchedule taint; NotFound for an unknown node."""
    spec = find_node(state, node).setdefault("spec", {})
    spec["unschedulable"] = True
    taints = spec.setdefault("taints", [])
    if not any(t.get("key") == TAINT_UNSCHEDULABLE for t in taints):
        taints.append({"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule", "timeAdded": timestamp(now)})


def uncordon(state: State, node: str) -> None:
    """Make `node` schedulable again and drop the unschedulable taint; NotFound for an unknown node."""
    spec = find_node(state, node).setdefault("spec", {})
    spec.pop("unschedulable", None)
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_UNSCHEDULABLE]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)


def schedule_pending(state: State, now: float) -> None:
    """One scheduler pass: try to bind every Pending, unbound pod, in creation order."""
    unscheduled = list(indexes(state).unscheduled)
    if not unscheduled:
        return
    # Free resources are computed once per node and pass (when a pod first looks at the node)
    # and debited on each bind.
    free_by_node = _FreeResources(state)
    # Free resources only shrink during a pass, so a pod asking what an earlier pod could not get
    # fails for the same reasons: remember the message per request shape.
    failed: dict[str, str] = {}
    sim_pods = state["sim"]["pods"]
    for key in sorted(unscheduled, key=lambda k: sim_pods.peek(k)["seq"]):
        _schedule(state, key, now, free_by_node, failed)


def start_bound_pods(state: State, now: float, ready_delay_s: float) -> None:
    """The kubelet: a pod bound `ready_delay_s` ago or earlier, and still Pending, becomes Running and Ready."""
    due = [key for key, bound_at in indexes(state).bound_pending.items() if now >= bound_at + ready_delay_s]
    for key in due:
        mark_running(state["pods"][key], now, ready=True)


def _schedule(
    state: State, key: str, now: float, free_by_node: dict[str, dict[str, int]], failed: dict[str, str]
) -> None:
    """The default scheduler for one pending pod: bind to the first node that fits, by name."""
    pod = state["pods"][key]
    nodes = state["nodes"]
    requests = _requests(pod)
    wanted_node = pinned_node({"spec": {"template": {"spec": pod["spec"]}}})
    shape = json.dumps([requests, wanted_node, pod["spec"].get("tolerations")], sort_keys=True)
    if shape in failed:
        set_condition(pod, "PodScheduled", False, now, reason="Unschedulable", message=failed[shape])
        return
    reasons: Counter[str] = Counter()
    candidates = sorted(nodes)
    if wanted_node is not None:
        # Every other node fails the affinity: count them without looking at each.
        candidates = [wanted_node] if wanted_node in nodes else []
        if len(nodes) > len(candidates):
            reasons["node(s) didn't match Pod's node affinity/selector"] = len(nodes) - len(candidates)
    for name in candidates:
        reason = _unfit_reason(state, name, pod, requests, wanted_node, free_by_node[name])
        if reason is None:
            _bind(state, key, name, requests, now)
            for resource, amount in requests.items():
                free_by_node[name][resource] = free_by_node[name].get(resource, 0) - amount
            return
        reasons[reason] += 1
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    message = f"0/{len(nodes)} nodes are available" + (f": {detail}." if detail else ".")
    failed[shape] = message
    set_condition(pod, "PodScheduled", False, now, reason="Unschedulable", message=message)


def _unfit_reason(
    state: State,
    name: str,
    pod: dict[str, Any],
    requests: dict[str, int],
    wanted_node: str | None,
    free: dict[str, int],
) -> str | None:
    """Why `pod` cannot go to node `name` (the scheduler's reason text), or None when it fits."""
    node = state["nodes"].peek(name)
    if wanted_node is not None and name != wanted_node:
        return "node(s) didn't match Pod's node affinity/selector"
    if not any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]):
        return "node(s) were not ready"
    if node["spec"].get("unschedulable"):
        return "node(s) were unschedulable"
    tolerations = pod["spec"].get("tolerations") or []
    for taint in node["spec"].get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            if taint["key"] == TAINT_UNSCHEDULABLE:
                continue  # reported as "unschedulable" above
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    for resource, amount in sorted(requests.items()):
        if amount > free.get(resource, 0):
            return f"Insufficient {resource}"
    return None


class _FreeResources(dict[str, dict[str, int]]):
    """Per node, on first use: allocatable extended resources, CPU (milli) and memory (MiB) minus
    what its bound, live pods request."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state

    def __missing__(self, name: str) -> dict[str, int]:
        node = self.state["nodes"].peek(name)
        allocatable = node["status"]["allocatable"]
        free = {key: int(parse_quantity(value)) for key, value in allocatable.items() if "/" in key}
        free["cpu"] = int(parse_quantity(allocatable.get("cpu", "0")) * 1000)
        free["memory"] = int(parse_quantity(allocatable.get("memory", "0")) / 2**20)
        pods = self.state["pods"]
        for pod_key in pods_on_node(self.state, name):
            pod = pods.peek(pod_key)
            if phase(pod) not in TERMINAL_PHASES:
                for resource, amount in _requests(pod).items():
                    free[resource] = free.get(resource, 0) - amount
        self[name] = free
        return free


def _bind(state: State, key: str, node_name: str, requests: dict[str, int], now: float) -> None:
    """Bind the pod to the node; kubelet admission fails it when the device plugin refuses the allocation."""
    pod = state["pods"][key]
    pod["spec"]["nodeName"] = node_name
    state["sim"]["pods"][key]["bound_at"] = now
    set_condition(pod, "PodScheduled", True, now)
    refusal = allocation_refusal(state, node_name, requests)
    if refusal is not None:
        pod["status"]["phase"] = "Failed"
        pod["status"]["reason"] = "UnexpectedAdmissionError"
        pod["status"]["message"] = refusal
        record_event(state, now, "Pod", key, "Warning", "UnexpectedAdmissionError", refusal)


def _requests(pod: dict[str, Any]) -> dict[str, int]:
    """What the pod asks of a node: its extended resources, CPU (milli) and memory (MiB)."""
    requests = _extended_requests(pod)
    cpu_milli, memory_mib = pod_host_requests(pod)
    if cpu_milli:
        requests["cpu"] = cpu_milli
    if memory_mib:
        requests["memory"] = memory_mib
    return requests


def _extended_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Extended resources (names with a "/") the pod asks for; limits win over requests."""
    totals: Counter[str] = Counter()
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        for key, value in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
            if "/" in key:
                totals[key] += int(parse_quantity(value))
    return {key: value for key, value in totals.items() if value > 0}


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """True when one of the pod's tolerations matches the node taint (key, value or Exists, and effect)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint["key"]:
                return True
        elif toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False
