"""How many replicas of each deployment one plan may move: its PodDisruptionBudgets, read from the cluster.

A PDB (policy/v1, through ``ClusterBackend.list_pdbs``) covers a deployment when its matchLabels
are all among the labels of the deployment's pods, in the same namespace. Its budget is what
Kubernetes' disruption controller computes, over the GPU pods it selects (``list_gpu_pods``):
``minAvailable`` n allows ready - n; ``maxUnavailable`` m allows m - (selected - ready); a
percentage is of the pods selected, rounded up, as Kubernetes does. Never below 0. Several PDBs
on one deployment: the smallest budget. No PDB: ``CONSOLIDATION_MOVES_PER_DEPLOYMENT``.

When the cluster cannot be read, no deployment may move (budget 0, the reason stated): a plan
must not be made on budgets nobody knows.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings

from nodes.cluster.base import ClusterBackend, ClusterError, ClusterPDB, ClusterPod
from nodes.contract import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE
from scheduler.models import Deployment

SETTING = "GPUPLANE_CONSOLIDATION_MOVES_PER_DEPLOYMENT"


@dataclass(frozen=True)
class Budget:
    allowed: int
    source: str  # "PDB ns/name (...)", or the setting, or why the PDBs are unknown
    from_pdb: bool


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(total * float(value.rstrip("%")) / 100)


def disruptions_allowed(pdb: ClusterPDB, selected: int, ready: int) -> int:
    """The PDB's disruptions allowed now, given how many pods it selects and how many are ready."""
    if pdb.min_available is not None:
        return max(0, ready - _scaled(pdb.min_available, selected))
    if pdb.max_unavailable is not None:
        return max(0, _scaled(pdb.max_unavailable, selected) - (selected - ready))
    return max(0, ready - selected)  # neither (the API server refuses that): nothing may go


def _selects(pdb: ClusterPDB, namespace: str, labels: dict[str, str]) -> bool:
    return pdb.namespace == namespace and all(labels.get(k) == v for k, v in pdb.match_labels.items())


def _describe(pdb: ClusterPDB, selected: int, ready: int, allowed: int) -> str:
    rule = (f"minAvailable {pdb.min_available}" if pdb.min_available is not None
            else f"maxUnavailable {pdb.max_unavailable}")
    return f"PDB {pdb.key} ({rule}, {ready} of {selected} ready: {allowed} may move)"


def deployment_budgets(deployments: Iterable[Deployment], cluster: ClusterBackend) -> dict[str, Budget]:
    """Deployment pk (as a string) -> its budget for one plan (see the module docstring)."""
    chosen = list(deployments)
    default = Budget(settings.CONSOLIDATION_MOVES_PER_DEPLOYMENT, SETTING, False)
    try:
        pdbs = cluster.list_pdbs()
        pods = [pod for pod in cluster.list_gpu_pods() if pod.gpu_requests] if pdbs else []
    except ClusterError as error:
        unknown = Budget(0, f"PodDisruptionBudgets could not be read ({error}): nothing moves", False)
        return {str(d.pk): unknown for d in chosen}
    budgets: dict[str, Budget] = {}
    for deployment in chosen:
        labels = _pod_labels(deployment, pods)
        found = default
        for pdb in pdbs:
            if not _selects(pdb, deployment.namespace, labels):
                continue
            covered = [p for p in pods if _selects(pdb, p.namespace, p.labels) and p.phase not in ("Succeeded", "Failed")]
            ready = sum(1 for p in covered if p.ready)
            allowed = disruptions_allowed(pdb, len(covered), ready)
            if not found.from_pdb or allowed < found.allowed:
                found = Budget(allowed, _describe(pdb, len(covered), ready, allowed), True)
        budgets[str(deployment.pk)] = found
    return budgets


def _pod_labels(deployment: Deployment, pods: list[ClusterPod]) -> dict[str, str]:
    """The labels its pods carry (read from one of them; else the ones gpuplane gives them)."""
    for pod in pods:
        if pod.namespace == deployment.namespace and pod.labels.get(LABEL_DEPLOYMENT) == str(deployment.pk):
            return pod.labels
    return {**(deployment.labels or {}), LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE, LABEL_DEPLOYMENT: str(deployment.pk)}
