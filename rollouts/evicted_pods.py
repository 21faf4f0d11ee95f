"""Pods a drain evicts that gpuplane did not place: can the default scheduler bind them somewhere they run?

gpuplane pre-warms its own replicas elsewhere before a drain. Another team's pod (owned by a
ReplicaSet, a StatefulSet, a Job) is only evicted: its controller makes a new pod, which the
default scheduler binds to a node where its requests fit. The scheduler counts extended
resources only; it does not know that a shared device plugin (time-slicing or MPS) refuses a pod
asking for more than one ``nvidia.com/gpu`` (``failRequestsGreaterThanOne``: the pod then fails
with UnexpectedAdmissionError, as `training/llama3-70b-finetune-0` did in issue 18). So the
preview refuses a rollout whose drains would evict such a pod when

- no schedulable node has room for it (it would stay Pending), or
- a node the scheduler could choose would refuse it (gpuplane cannot steer another team's pod).

The rollout is replayed batch by batch, as the reconciler drains: while a batch drains, its
nodes are cordoned and every other Ready, schedulable node may take the evicted pods (earlier
batches' nodes at the target config, emptied by their drain; a node skipped at its turn as it
is); a pod bound to a later batch's node is evicted again when that node drains. Room is what a
node advertises minus what its pods request; each pod debits the node the default scheduler
takes (the first by name where it fits, as the simulated one does), so two pods never count the
same room. gpuplane's own copies are placed by the engine's dry run (``placement_dry_run``), in
GPU shares. Bare and do-not-disrupt pods are never evicted (``rollouts.drain_blockers``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence

from nodes.cluster.base import ClusterNode, ClusterPod
from nodes.contract import (
    LABEL_DEPLOYMENT,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
    STRATEGY_NONE,
)
from nodes.sharing.node_config import NodeConfig
from nodes.vocabulary import SharingMode
from rollouts.drain_blockers import drain_blockers, drained_pods

_ACTIVE_PHASES = ("Pending", "Running")


def rebinding_problems(pods: list[ClusterPod], nodes: Sequence[ClusterNode], batches: Sequence[Sequence[str]],
                       target: NodeConfig, skipped_at_turn: Collection[str] = ()) -> list[str]:
    """Why other teams' pods the rollout's drains evict would not run again (see the module docstring); [] when they would."""
    room = {n.name: _free(n, pods) for n in sorted(nodes, key=lambda n: n.name) if n.ready and not n.unschedulable}
    shared = {n.name for n in nodes if n.labels.get(LABEL_SHARING_STRATEGY, STRATEGY_NONE) != STRATEGY_NONE}
    by_name = {n.name: n for n in nodes}
    arrived: dict[str, list[ClusterPod]] = defaultdict(list)  # node -> evicted pods bound there again
    problems: list[str] = []
    for batch in batches:
        drained = [name for name in sorted(batch) if name not in skipped_at_turn and name in by_name
                   and not drain_blockers(drained_pods(pods, name))]
        open_room = {name: free for name, free in room.items() if name not in batch}
        for name in drained:
            evicted = [p for p in drained_pods(pods, name) if LABEL_DEPLOYMENT not in p.labels and p.gpu_requests]
            for pod in sorted(evicted, key=lambda p: p.key) + arrived.pop(name, []):
                bound, problem = _rebind(pod, open_room, shared)
                if problem:
                    problems.append(f"{pod.key} on {name} (not placed by gpuplane) would be evicted and {problem}")
                elif bound:
                    arrived[bound].append(pod)
        for name in drained:  # done: at the target config, emptied, open again
            room[name] = _target_room(by_name[name], target)
            shared.discard(name)
            if target.mode in (SharingMode.MPS, SharingMode.TIMESLICE, SharingMode.MPS_WEIGHTED):
                shared.add(name)
    return problems


def _free(node: ClusterNode, pods: list[ClusterPod]) -> dict[str, int]:
    """Each resource the node advertises minus what its pods (Pending or Running) request."""
    requested: dict[str, int] = defaultdict(int)
    for pod in pods:
        if pod.node_name == node.name and pod.phase in _ACTIVE_PHASES:
            for resource, amount in pod.gpu_requests.items():
                requested[resource] += amount
    return {resource: amount - requested[resource] for resource, amount in node.allocatable.items()}


def _target_room(node: ClusterNode, target: NodeConfig) -> dict[str, int]:
    """What a drained node advertises once it runs ``target`` (its DaemonSet pods request no GPU)."""
    gpus = len(node.gpus) or node.allocatable.get(RESOURCE_GPU, 0)
    room = {resource: amount for resource, amount in node.allocatable.items()
            if resource != RESOURCE_GPU and not resource.startswith(RESOURCE_MIG_PREFIX)}
    if target.mode == SharingMode.MIG:
        room[RESOURCE_GPU] = 0
        for profile, count in target.mig_layout or ():
            room[f"{RESOURCE_MIG_PREFIX}{profile}"] = count * gpus
    else:
        room[RESOURCE_GPU] = gpus * (target.replicas or 1)
    return room


def _rebind(pod: ClusterPod, room: dict[str, dict[str, int]], shared: set[str]) -> tuple[str, str]:
    """(the node the default scheduler binds ``pod`` to, debited; what goes wrong, "" when nothing does)."""
    fits = [name for name, free in room.items()
            if all(free.get(resource, 0) >= amount for resource, amount in pod.gpu_requests.items())]
    if not fits:
        wanted = ", ".join(f"{amount} {resource}" for resource, amount in sorted(pod.gpu_requests.items()))
        return "", f"fits on no other node ({wanted}): it would stay Pending"
    gpus = pod.gpu_requests.get(RESOURCE_GPU, 0)
    refusing = [name for name in fits if gpus > 1 and name in shared]
    if refusing:
        return "", (f"the default scheduler may bind it to {', '.join(refusing)}, whose device plugin shares GPUs "
                    f"and refuses a pod asking for {gpus} {RESOURCE_GPU} (it would fail: UnexpectedAdmissionError)")
    for resource, amount in pod.gpu_requests.items():
        room[fits[0]][resource] = room[fits[0]].get(resource, 0) - amount
    return fits[0], ""
