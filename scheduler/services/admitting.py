"""Reserving the partition of a pod the admission webhook places (``scheduler.admission``).

The same decision, quota check, claims, decision matrix and audit as ``placing.place_replicas``
(its own steps, reused), without the cluster calls: the pod being admitted is the workload.
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from gpuplane.observability import PLACEMENT_DECISION_SECONDS
from lifecycle.transitions import transition
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment, Placement
from scheduler.services.deciding import ReplicaPlan
from scheduler.services.placing import _decide_and_reserve, _record_decisions
from scheduler.services.spec import DeploySpec


def admit_replica(deployment: Deployment, spec: DeploySpec, *, reason: str) -> tuple[ReplicaPlan, int]:
    """Decide and reserve the one replica of a pod admitted by the webhook; return its plan and the
    id of its stored decision. The same decision, quota check, claims and audit as ``place_replicas``,
    but no workload is created (the pod being admitted is it): the deployment (unsaved, origin
    webhook) is stored PLACED and its placement BINDING until ``scheduler.admission.watch_admitted``
    sees the pod bound, gone or never bound. Raises ``NoCapacity`` (nothing stored)."""
    with PLACEMENT_DECISION_SECONDS.time():
        placements, plans, node_pks = _decide_and_reserve(deployment, spec, [0], None)
        decision_ids = _record_decisions(deployment, plans, node_pks)
        with transaction.atomic():
            transition(Deployment, deployment.pk, [DeploymentStatus.PENDING], DeploymentStatus.PLACED,
                       actor="system:webhook", reason=reason,
                       values={"placed_at": timezone.now(), "message": reason}, instance=deployment)
            Placement.objects.filter(pk__in=[p.pk for p in placements], status=PlacementStatus.RESERVED).update(
                status=PlacementStatus.BINDING)
    return plans[0], decision_ids[0]
