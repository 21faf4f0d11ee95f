"""Indexes over the simulated cluster's objects, so that catching up with the clock scans no fleet.

Every call lets the simulation catch up with the clock (the scheduler, kubelet, controllers, MIG
manager, device plugin restarts), and each of those looks for a few objects among thousands: pods
waiting for a node or for readiness, pods on one node or of one Deployment, nodes with a pending
timer. These are those sets, kept per process next to its objects and brought up to date only for
the keys handed out or read from the database since they last looked (`Collection.unsynced`).
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodes.cluster.sim.store import State


class Indexes:
    """Pods by node, Deployment and ReplicaSet; pods waiting to be scheduled or started; nodes with
    a pending MIG reconfiguration or device plugin restart."""

    def __init__(self) -> None:
        self._pod_entries: dict[str, tuple[str, str, str]] = {}  # pod key -> node, Deployment, ReplicaSet
        self.by_node: dict[str, set[str]] = {}
        self.by_deployment: dict[str, set[str]] = {}
        self.unscheduled: set[str] = set()
        self.bound_pending: dict[str, float] = {}  # pod key -> bind time, for Pending pods on a node
        self.replica_set_pods: Counter[str] = Counter()  # other teams' ReplicaSet -> live pods it owns
        self.mig_pending: set[str] = set()
        self.plugin_restarts: dict[str, float] = {}  # node -> when its restarted plugin is ready
        # Deployments that were handed out, or whose pods were, since the last commit: every
        # committed state has been reconciled, so only these can need the ReplicaSet controller
        # or a new status.
        self.changed_deployments: set[str] = set()

    def sync(self, state: State) -> Indexes:
        """Look again at the objects handed out or read since the last sync; returns self."""
        pods, sim_pods, sim_nodes = state["pods"], state["sim"]["pods"], state["sim"]["nodes"]
        deployments = state["deployments"]
        if deployments.unsynced:
            self.changed_deployments |= deployments.unsynced
            deployments.unsynced.clear()
        if pods.unsynced or sim_pods.unsynced:
            for key in pods.unsynced | sim_pods.unsynced:
                self._index_pod(key, dict.get(pods, key), dict.get(sim_pods, key))
            pods.unsynced.clear()
            sim_pods.unsynced.clear()
        if sim_nodes.unsynced:
            for name in sim_nodes.unsynced:
                self._index_node(name, dict.get(sim_nodes, name))
            sim_nodes.unsynced.clear()
        return self

    def check(self, state: State) -> None:
        """AssertionError unless these indexes are what a full rebuild gives (tests only)."""
        self.sync(state)
        fresh = Indexes()
        pods, sim_pods = state["pods"], state["sim"]["pods"]
        for key in set(pods) | set(sim_pods):
            fresh._index_pod(key, dict.get(pods, key), dict.get(sim_pods, key))
        for name, sim in dict.items(state["sim"]["nodes"]):
            fresh._index_node(name, sim)
        for attribute in ("by_node", "by_deployment", "unscheduled", "bound_pending", "replica_set_pods",
                          "mig_pending", "plugin_restarts"):
            mine, theirs = getattr(self, attribute), getattr(fresh, attribute)
            if isinstance(mine, dict) and not isinstance(mine, Counter):
                mine = {k: v for k, v in mine.items() if v}
            if isinstance(mine, Counter):
                mine = +mine
            if mine != theirs:
                raise AssertionError(f"index {attribute} is stale: {mine!r} != {theirs!r}")

    def _index_pod(self, key: str, pod: dict[str, Any] | None, sim: dict[str, Any] | None) -> None:
        old = self._pod_entries.pop(key, None)
        if old is not None:
            node, deployment, replica_set = old
            _discard(self.by_node, node, key)
            _discard(self.by_deployment, deployment, key)
            if deployment:
                self.changed_deployments.add(deployment)
            if replica_set:
                self.replica_set_pods[replica_set] -= 1
            self.unscheduled.discard(key)
            self.bound_pending.pop(key, None)
        deployment = (sim or {}).get("deployment") or ""
        node = ""
        replica_set = ""
        if pod is not None:
            node = pod["spec"].get("nodeName") or ""
            pending = pod.get("status", {}).get("phase", "Pending") == "Pending"
            if pending and not node:
                self.unscheduled.add(key)
            bound_at = (sim or {}).get("bound_at")
            if pending and node and bound_at is not None:
                self.bound_pending[key] = bound_at
            owners = pod["metadata"].get("ownerReferences") or []
            if owners and owners[0].get("kind") == "ReplicaSet" and not deployment:
                replica_set = f"{pod['metadata']['namespace']}/{owners[0].get('name', '')}"
                self.replica_set_pods[replica_set] += 1
        if node:
            self.by_node.setdefault(node, set()).add(key)
        if deployment:
            self.by_deployment.setdefault(deployment, set()).add(key)
            self.changed_deployments.add(deployment)
        if pod is not None or sim is not None:
            self._pod_entries[key] = (node, deployment, replica_set)

    def _index_node(self, name: str, sim: dict[str, Any] | None) -> None:
        self.mig_pending.discard(name)
        self.plugin_restarts.pop(name, None)
        if sim is None:
            return
        mig = sim.get("mig")
        if mig and mig.get("pending"):
            self.mig_pending.add(name)
        restart = sim.get("restart")
        if restart is not None and restart.get("ready_at") is not None:
            self.plugin_restarts[name] = restart["ready_at"]


def _discard(index: dict[str, set[str]], value: str, key: str) -> None:
    if value:
        members = index.get(value)
        if members is not None:
            members.discard(key)
            if not members:
                del index[value]


def indexes(state: State) -> Indexes:
    """The state's indexes, up to date with every object handed out so far."""
    return state.indexes.sync(state)
