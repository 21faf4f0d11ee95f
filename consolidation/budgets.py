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

from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings

from nodes.cluster.base import ClusterBackend, ClusterError, ClusterPod
from nodes.cluster.disruption import budget_of, disruptions_allowed, selects
from nodes.contract import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE
from scheduler.models import Deployment

__all__ = ["Budget", "deployment_budgets", "disruptions_allowed"]

SETTING = "GPUPLANE_CONSOLIDATION_MOVES_PER_DEPLOYMENT"


@dataclass(frozen=True)
class Budget:
    allowed: int
    source: str  # "PDB ns/name (...)", or the setting, or why the PDBs are unknown
    from_pdb: bool


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
            if not selects(pdb, deployment.namespace, labels):
                continue
            allowed, described = budget_of(pdb, pods)
            if not found.from_pdb or allowed < found.allowed:
                found = Budget(allowed, described, True)
        budgets[str(deployment.pk)] = found
    return budgets


def _pod_labels(deployment: Deployment, pods: list[ClusterPod]) -> dict[str, str]:
    """The labels its pods carry (read from one of them; else the ones gpuplane gives them)."""
    for pod in pods:
        if pod.namespace == deployment.namespace and pod.labels.get(LABEL_DEPLOYMENT) == str(deployment.pk):
            return pod.labels
    return {**(deployment.labels or {}), LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE, LABEL_DEPLOYMENT: str(deployment.pk)}
