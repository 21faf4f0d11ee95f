"""The Eviction API in the simulator, with policy/v1 PodDisruptionBudgets.

As in Kubernetes: DaemonSet pods are left alone (drains skip them), a pod matched by several
budgets cannot be evicted, and a budget blocks an eviction (HTTP 429) unless its
``status.disruptionsAllowed`` (computed as the disruption controller does: minAvailable or
maxUnavailable, an int or a percentage of the pods it selects rounded up, see
``nodes.cluster.disruption``) is above 0; a running but unready pod may go while the budget's
desired healthy count is met (the default IfHealthyBudget policy). Pending, Succeeded and Failed
pods ignore budgets. An evicted
Deployment pod is recreated by its ReplicaSet under a new name (see `workloads`), and so is another
team's pod with a ReplicaSet owner (`replica_sets`); a bare pod is gone for good. Each eviction
is an `Evicted` event in the record, told apart from every other way a pod can go.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from nodes.cluster.base import ClusterError, ClusterPDB, EvictionBlocked, NotFound
from nodes.cluster.disruption import desired_healthy
from nodes.cluster.parsing import parse_pdb
from nodes.cluster.sim.objects import REMOVED_EVICTED, TERMINAL_PHASES, is_ready, owner_kind, phase, remove_pod
from nodes.cluster.sim.store import State

EVICTION_BLOCKED_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
_PERCENT = re.compile(r"[0-9]+%")
T = TypeVar("T")


def put_pdb(state: State, namespace: str, name: str, selector: dict[str, str], min_available: int | str | None = None,
            max_unavailable: int | str | None = None) -> None:
    """Add or replace a PodDisruptionBudget that selects pods by matchLabels `selector`, with
    exactly one of minAvailable and maxUnavailable, each an int >= 0 or a "N%" (as the API server
    requires)."""
    if (min_available is None) == (max_unavailable is None):
        raise ClusterError("a PodDisruptionBudget takes exactly one of minAvailable and maxUnavailable")
    value = min_available if min_available is not None else max_unavailable
    if not (isinstance(value, int) and value >= 0) and not (isinstance(value, str) and _PERCENT.fullmatch(value)):
        raise ClusterError(f"a PodDisruptionBudget's budget must be an integer >= 0 or a percentage, not {value!r}")
    budget = {"minAvailable": min_available} if min_available is not None else {"maxUnavailable": max_unavailable}
    state["pdbs"][f"{namespace}/{name}"] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**budget, "selector": {"matchLabels": dict(selector)}},
    }


def evict_pod(state: State, namespace: str, name: str, now: float) -> None:
    """Evict a pod as the Eviction API would.

    Raises NotFound for an unknown pod, ClusterError for a DaemonSet pod or a pod matched by
    several PodDisruptionBudgets, and EvictionBlocked when its budget forbids it now.
    """
    key = f"{namespace}/{name}"
    pod = state["pods"].get(key)
    if pod is None:
        raise NotFound(f'pods "{name}" not found in namespace {namespace}')
    if owner_kind(pod) == "DaemonSet":
        raise ClusterError(f"cannot evict pod {key}: it is managed by a DaemonSet")
    budgets = [
        pdb
        for pdb_key, pdb in sorted(state["pdbs"].items())
        if pdb_key.startswith(f"{namespace}/") and _selector_matches(pdb, pod)
    ]
    if len(budgets) > 1:
        raise ClusterError(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
    if budgets and phase(pod) not in ("Pending", *TERMINAL_PHASES):
        _check_budget(state, budgets[0], pod)
    remove_pod(state, now, key, REMOVED_EVICTED, "evicted through the Eviction API")


def pdb_status(state: State, pdb: dict[str, Any]) -> dict[str, int]:
    """The budget's status as the disruption controller writes it: expectedPods (the pods it
    selects, not finished), currentHealthy (those ready), desiredHealthy, disruptionsAllowed."""
    namespace = pdb["metadata"]["namespace"]
    selected = [other for key, other in state["pods"].items()
                if key.startswith(f"{namespace}/") and _selector_matches(pdb, other)
                and phase(other) not in TERMINAL_PHASES]
    healthy = sum(1 for other in selected if is_ready(other))
    desired = desired_healthy(parse_pdb(pdb), len(selected))
    return {"expectedPods": len(selected), "currentHealthy": healthy, "desiredHealthy": desired,
            "disruptionsAllowed": max(0, healthy - desired)}


def _check_budget(state: State, pdb: dict[str, Any], pod: dict[str, Any]) -> None:
    """Raise EvictionBlocked when the budget allows no disruption now."""
    status = pdb_status(state, pdb)
    # IfHealthyBudget (the default policy): a running but unready pod may go while the budget is met.
    if not is_ready(pod) and status["currentHealthy"] >= status["desiredHealthy"]:
        return
    if status["disruptionsAllowed"] < 1:
        raise EvictionBlocked(EVICTION_BLOCKED_MESSAGE)


def _selector_matches(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    # policy/v1: an empty selector selects every pod of the namespace.
    match_labels = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in match_labels.items())


class PodDisruptionBudgetAPI:
    """SimulatedCluster's PodDisruptionBudget methods: ``list_pdbs`` / ``apply_pdb`` / ``delete_pdb``
    of the ClusterBackend protocol, and ``add_pdb`` / ``pdb_status`` for seeding and tests."""

    if TYPE_CHECKING:
        def _operate(self, operation: str, action: Callable[[State, float], T]) -> T: ...

        def _transaction(self) -> AbstractContextManager[State]: ...

    def add_pdb(self, namespace: str, name: str, selector: dict[str, str], min_available: int | str | None = None,
                *, max_unavailable: int | str | None = None) -> None:
        """Add or replace a policy/v1 PodDisruptionBudget with matchLabels `selector` and one of
        minAvailable or maxUnavailable."""
        with self._transaction() as state:
            put_pdb(state, namespace, name, selector, min_available, max_unavailable)

    def list_pdbs(self) -> list[ClusterPDB]:
        """The stored PodDisruptionBudgets, read by the same parser as the Kubernetes backend's."""
        return self._operate("list_pdbs", lambda s, now: [parse_pdb(s["pdbs"].peek(k)) for k in sorted(s["pdbs"])])

    def apply_pdb(self, pdb: ClusterPDB) -> None:
        """Create or replace a PodDisruptionBudget (the API server's checks: one budget, int or percent)."""
        self._operate("apply_pdb", lambda state, now: put_pdb(
            state, pdb.namespace, pdb.name, pdb.match_labels, pdb.min_available, pdb.max_unavailable))

    def delete_pdb(self, namespace: str, name: str) -> None:
        """Delete a PodDisruptionBudget; one already gone is no error (as the backends agree)."""
        def action(state: State, now: float) -> None:
            if f"{namespace}/{name}" in state["pdbs"]:
                del state["pdbs"][f"{namespace}/{name}"]
        self._operate("delete_pdb", action)

    def pdb_status(self, namespace: str, name: str) -> dict[str, int]:
        """The budget's ``status`` as the disruption controller would write it (disruptionsAllowed...)."""
        with self._transaction() as state:
            return pdb_status(state, state["pdbs"][f"{namespace}/{name}"])
