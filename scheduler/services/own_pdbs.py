"""PodDisruptionBudgets for gpuplane's own deployments (docs/design.md section 5a).

A deployment with more than one replica gets ``gpuplane-deployment-<id>`` in its namespace,
selecting its pods (``gpuplane.io/deployment=<id>``) with ``maxUnavailable: 1``: the Eviction
API then lets one of its replicas go at a time, whoever evicts (gpuplane's mover, a drain, the
cluster autoscaler). ``sync_pdbs`` reconciles them with the deployments, as a controller would:
it creates what is missing, corrects what differs, and deletes the ones whose deployment is
gone or down to one replica (a one-replica budget of maxUnavailable 1 protects nothing).

A deployment whose pods a budget of someone else's already selects (its owner's) gets none, and
loses the one it had: the Eviction API refuses every eviction of a pod that two budgets select,
so a second budget would hold every move of that deployment forever. The owner's budget governs.
"""
from __future__ import annotations

from nodes.cluster.base import ClusterBackend, ClusterPDB
from nodes.cluster.disruption import selects
from nodes.contract import LABEL_DEPLOYMENT
from scheduler.models import Deployment
from scheduler.services.watching import ACTIVE

PDB_PREFIX = "gpuplane-deployment-"
MAX_UNAVAILABLE = 1


def pdb_for(deployment: Deployment) -> ClusterPDB:
    """The budget ``deployment`` should have (whether it has more than one replica or not)."""
    return ClusterPDB(namespace=deployment.namespace, name=f"{PDB_PREFIX}{deployment.pk}",
                      match_labels={LABEL_DEPLOYMENT: str(deployment.pk)}, max_unavailable=MAX_UNAVAILABLE)


def sync_pdbs(cluster: ClusterBackend) -> dict[str, int]:
    """Create, correct or delete gpuplane's own PDBs; how many of each. ClusterError propagates."""
    budgets = cluster.list_pdbs()
    theirs = [pdb for pdb in budgets if not pdb.name.startswith(PDB_PREFIX)]
    wanted = Deployment.objects.filter(status__in=ACTIVE, replicas__gt=1).exclude(pk__in=_governed(cluster, theirs))
    want = {pdb.key: pdb for pdb in map(pdb_for, wanted)}
    have = {pdb.key: pdb for pdb in budgets if pdb.name.startswith(PDB_PREFIX)}
    counts = {"applied": 0, "deleted": 0}
    for key, pdb in want.items():
        if have.get(key) != pdb:
            cluster.apply_pdb(pdb)
            counts["applied"] += 1
    for key, pdb in have.items():
        if key not in want:
            cluster.delete_pdb(pdb.namespace, pdb.name)
            counts["deleted"] += 1
    return counts


def _governed(cluster: ClusterBackend, theirs: list[ClusterPDB]) -> set[int]:
    """The deployments with a pod that one of ``theirs`` (budgets not gpuplane's) selects."""
    if not theirs:
        return set()
    return {int(pod.labels[LABEL_DEPLOYMENT]) for pod in cluster.list_gpu_pods()
            if pod.labels.get(LABEL_DEPLOYMENT, "").isdigit()
            and any(selects(pdb, pod.namespace, pod.labels) for pdb in theirs)}
