"""Webhook-placed pods after admission: running once bound, released when gone or never bound.

A pod the admission webhook placed (``scheduler.admission``) is a Deployment of origin ``webhook``
whose one placement holds its partition; ``watch_deployment`` hands such a deployment here. The
pod carries ``gpuplane.io/deployment=<id>``: once a pod with that label is bound the deployment is
RUNNING; when none is left it is released (the pod went away), and so it is when none binds
within ``GPUPLANE_WEBHOOK_BIND_TIMEOUT_S`` of admission (kube-scheduler's assumed-pod expiry: a pod
the API server never stored after our answer, a later webhook refused, or nobody scheduled).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lifecycle.audit import SYSTEM_WATCHER, record
from lifecycle.transitions import transition
from nodes.cluster.base import ClusterBackend
from nodes.contract import LABEL_DEPLOYMENT
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment, Placement
from scheduler.services.capacity import release_placements

ORIGIN_WEBHOOK = "webhook"


def watch_admitted(deployment: Deployment, cluster: ClusterBackend, now: datetime | None = None) -> str:
    """One look at a webhook-placed pod: "running" once bound, "waiting" until then, "released"
    when the pod went away or never bound within ``GPUPLANE_WEBHOOK_BIND_TIMEOUT_S``."""
    now = now or timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(watched_at=now)
    pods = [p for p in cluster.list_gpu_pods()
            if p.namespace == deployment.namespace and p.labels.get(LABEL_DEPLOYMENT) == str(deployment.pk)
            and p.phase in ("Pending", "Running")]
    bound = [p for p in pods if p.node_name]
    if bound:
        if deployment.status == DeploymentStatus.PLACED:
            with transaction.atomic():
                if transition(Deployment, deployment.pk, DeploymentStatus.PLACED, DeploymentStatus.RUNNING,
                              actor=SYSTEM_WATCHER, reason=f"pod {bound[0].name} bound to {bound[0].node_name}",
                              values={"message": f"pod {bound[0].name} on {bound[0].node_name}"}):
                    Placement.objects.filter(deployment_id=deployment.pk).exclude(
                        status=PlacementStatus.RELEASED).update(status=PlacementStatus.RUNNING)
        return "running"
    started = deployment.placed_at or deployment.created_at
    if deployment.status == DeploymentStatus.PLACED and (
            now - started < timedelta(seconds=settings.GPUPLANE_WEBHOOK_BIND_TIMEOUT_S)):
        return "waiting"  # not bound yet (or not even stored yet by the API server)
    why = ("its pod went away" if deployment.status == DeploymentStatus.RUNNING
           else f"its pod did not bind within {settings.GPUPLANE_WEBHOOK_BIND_TIMEOUT_S} s of admission")
    release_admitted(deployment, why)
    return "released"


def release_admitted(deployment: Deployment, why: str) -> bool:
    """Release a webhook-placed pod's partition and mark it DELETED; False if it was not active."""
    with transaction.atomic():
        if not transition(Deployment, deployment.pk,
                          [DeploymentStatus.PENDING, DeploymentStatus.PLACED, DeploymentStatus.RUNNING],
                          DeploymentStatus.DELETED, actor=SYSTEM_WATCHER, reason=why, values={"message": why}):
            return False
        placements = Placement.objects.filter(deployment_id=deployment.pk)
        release_placements(placements.values_list("pk", flat=True))
        for placement in placements.exclude(status=PlacementStatus.RELEASED):
            record("placement.released", placement, actor=SYSTEM_WATCHER, reason=why,
                   before={"status": placement.status}, after={"status": PlacementStatus.RELEASED.value})
        placements.update(status=PlacementStatus.RELEASED)
    return True
