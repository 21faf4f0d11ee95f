"""What Kubernetes says may be disrupted: PodDisruptionBudget arithmetic and the do-not-disrupt mark.

Pure (no Django, no client): the simulated cluster's Eviction API, consolidation's per-plan
budgets and the mover's blocked reasons all compute a budget the way Kubernetes' disruption
controller does (``status.disruptionsAllowed``):

- ``minAvailable`` n: healthy - n;
- ``maxUnavailable`` m: healthy - (expected - m), expected being the pods the budget selects;
- a percentage is of the pods expected, rounded up (``intstr.GetScaledValueFromIntOrPercent``
  with roundUp, as the controller calls it); never below 0.

A pod or node annotated (or, for a pod, labelled) ``gpuplane.io/do-not-disrupt=true`` is never
disrupted by gpuplane.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from nodes.cluster.base import ClusterNode, ClusterPDB, ClusterPod
from nodes.contract import ANNOTATION_DO_NOT_DISRUPT


def scaled(value: int | str, total: int) -> int:
    """An int-or-percent budget value against ``total`` pods (a percentage rounded up)."""
    if isinstance(value, int):
        return value
    return math.ceil(total * float(value.rstrip("%")) / 100)


def desired_healthy(pdb: ClusterPDB, expected: int) -> int:
    """How many of the ``expected`` pods the PDB wants healthy (``status.desiredHealthy``)."""
    if pdb.min_available is not None:
        return scaled(pdb.min_available, expected)
    if pdb.max_unavailable is not None:
        return max(0, expected - scaled(pdb.max_unavailable, expected))
    return expected  # neither (the API server refuses that): nothing may go


def disruptions_allowed(pdb: ClusterPDB, selected: int, ready: int) -> int:
    """The PDB's disruptions allowed now, given how many pods it selects and how many are ready."""
    return max(0, ready - desired_healthy(pdb, selected))


def selects(pdb: ClusterPDB, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether the PDB's matchLabels select a pod of ``namespace`` with ``labels`` (policy/v1: an
    empty selector selects every pod of its namespace)."""
    return pdb.namespace == namespace and all(labels.get(k) == v for k, v in pdb.match_labels.items())


def describe(pdb: ClusterPDB, selected: int, ready: int, allowed: int) -> str:
    """``PDB ns/name (minAvailable 2, 2 of 2 ready: 0 may move)``."""
    rule = (f"minAvailable {pdb.min_available}" if pdb.min_available is not None
            else f"maxUnavailable {pdb.max_unavailable}")
    return f"PDB {pdb.key} ({rule}, {ready} of {selected} ready: {allowed} may move)"


def budget_of(pdb: ClusterPDB, pods: list[ClusterPod]) -> tuple[int, str]:
    """Disruptions allowed by ``pdb`` over ``pods`` (those not finished it selects) and its description."""
    covered = [p for p in pods if selects(pdb, p.namespace, p.labels) and p.phase not in ("Succeeded", "Failed")]
    ready = sum(1 for p in covered if p.ready)
    allowed = disruptions_allowed(pdb, len(covered), ready)
    return allowed, describe(pdb, len(covered), ready, allowed)


def _marked(values: Mapping[str, str]) -> bool:
    return str(values.get(ANNOTATION_DO_NOT_DISRUPT, "")).lower() == "true"


def pod_do_not_disrupt(pod: ClusterPod) -> bool:
    """True for a pod annotated or labelled ``gpuplane.io/do-not-disrupt=true``."""
    return _marked(pod.annotations) or _marked(pod.labels)


def node_do_not_disrupt(node: ClusterNode) -> bool:
    """True for a node annotated or labelled ``gpuplane.io/do-not-disrupt=true``: nothing on it is moved."""
    return _marked(node.annotations) or _marked(node.labels)
