"""Watching deployments until they run, sweeping the ones nobody watches, and failing them.

Once the workloads exist and the deployment is PLACED, ``scheduler.tasks.watch_deployment_task``
is enqueued: it calls ``watch_deployment`` until every workload is ready (RUNNING), or fails and
releases it after ``DEPLOYMENT_WATCH_TIMEOUT_S``. Enqueueing never fails a deploy (a broker
outage is logged); ``sweep_deployments`` (from beat, every 30 s) watches every pending or placed
deployment nobody looked at for a watch interval, so a watch never enqueued, out of retries or
lost with its worker, and a deployment left PENDING by a process that died, still end RUNNING or
released. The task is looked up in Celery's registry by name, so this module never imports
``scheduler.tasks`` (which imports this one).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, cast

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from lifecycle.audit import SYSTEM_WATCHER, record
from lifecycle.transitions import transition
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError, ClusterPod, NotFound
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment, Placement
from scheduler.services.admitted import ORIGIN_WEBHOOK, watch_admitted  # a pod placed at admission
from scheduler.services.capacity import release_placements
from scheduler.services.execution import ACTIVE_PLACEMENT_STATUSES, delete_workloads, workload_names
from scheduler.services.releasing import ACTIVE_PLACEMENT, release_replica

logger = logging.getLogger(__name__)

WATCH_TASK = "scheduler.tasks.watch_deployment_task"
ACTIVE = (DeploymentStatus.PENDING, DeploymentStatus.PLACED, DeploymentStatus.RUNNING)
WATCH_RUNNING, WATCH_WAITING, WATCH_FAILED, WATCH_GONE = "running", "waiting", "failed", "gone"
WATCH_ERROR = "error"
SWEEP_BATCH = 200  # deployments one sweep looks at, stalest first; the next sweep takes the rest


def fail_deployment(deployment: Deployment, message: str, *, from_statuses: Iterable[str] = ACTIVE,
                    actor: Any = SYSTEM_WATCHER) -> bool:
    """Mark an active deployment FAILED and release its placements; False if it was not active."""
    with transaction.atomic():
        if not transition(Deployment, deployment.pk, list(from_statuses), DeploymentStatus.FAILED,
                          actor=actor, reason=message, values={"message": message}):
            return False
        placements = Placement.objects.filter(deployment_id=deployment.pk)
        release_placements(placements.values_list("pk", flat=True))
        placements.exclude(status=PlacementStatus.RELEASED).update(status=PlacementStatus.FAILED)
    deployment.refresh_from_db()
    return True


def enqueue_watch(deployment_id: int) -> None:
    """Start watching a placed deployment; never raises.

    The workloads exist and the GPUs are held whatever the broker says: a broker that is down
    must not turn a good deploy into an error (and a reservation nobody releases). Without the
    task, ``sweep_deployments`` watches it (from beat, every 30 s).
    """
    try:
        current_app.tasks[WATCH_TASK].apply_async((deployment_id,), countdown=settings.DEPLOYMENT_WATCH_INTERVAL_S)
    except Exception:  # any broker or transport error: kombu's, redis', a socket's
        logger.warning("could not enqueue the watch of deployment %s; the sweeper will watch it", deployment_id,
                       exc_info=True)


def watch_runs_inline() -> bool:
    """True when ``enqueue_watch`` runs the watch right here (Celery's eager mode: tests, dev)."""
    return bool(current_app.conf.task_always_eager)


def watch_deployment(deployment_id: int, *, cluster: ClusterBackend | None = None,
                     now: datetime | None = None) -> str:
    """One look at a deployment being started; returns what the watcher should do next.

    - "running": every workload is ready; the deployment (PLACED -> RUNNING) and its placements
      are marked running.
    - "waiting": not ready yet and the timeout not reached; look again later.
    - "failed": not ready ``DEPLOYMENT_WATCH_TIMEOUT_S`` after placement (or never placed that
      long after creation, e.g. the deploying process died), or a workload vanished: its
      workloads are deleted, everything is released and it is FAILED.
    - A RUNNING deployment that gained replicas (a copy pre-warmed elsewhere) stays RUNNING: each
      new replica is marked running once its workload is ready ("running" when none is left
      starting, else "waiting"); one not ready within the timeout is released alone.
    - "gone" / another status: nothing to do (deleted, failed, already running).
    ``ClusterError`` (other than a vanished workload) propagates, so the caller retries.
    Every look at a pending, placed or starting deployment sets its ``watched_at`` to ``now`` (the
    sweeper leaves deployments looked at within the watch interval to their watch task).
    """
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None:
        return WATCH_GONE
    if deployment.origin == ORIGIN_WEBHOOK and deployment.status in ACTIVE:
        return watch_admitted(deployment, cluster if cluster is not None else get_cluster(), now)
    starting = deployment.status == DeploymentStatus.RUNNING and _starting(deployment).exists()
    if deployment.status not in (DeploymentStatus.PENDING, DeploymentStatus.PLACED) and not starting:
        return str(deployment.status)
    backend = cluster if cluster is not None else get_cluster()
    now = now or timezone.now()
    # Recorded before asking the cluster: an unreachable cluster was looked at too (the watch
    # task retries it on its own); update() leaves updated_at, the last status change, alone.
    Deployment.objects.filter(pk=deployment.pk).update(watched_at=now)
    if starting:
        return _watch_extra_replicas(deployment, backend, now)
    timeout = timedelta(seconds=settings.DEPLOYMENT_WATCH_TIMEOUT_S)
    names = workload_names(deployment, active_only=True)
    if deployment.status == DeploymentStatus.PLACED:
        try:
            # The workloads of its live replicas: a released one's workload is gone by design.
            live = dict.fromkeys(Placement.objects.filter(deployment_id=deployment.pk, status__in=ACTIVE_PLACEMENT)
                                 .exclude(workload_name="").order_by("replica_index")
                                 .values_list("workload_name", flat=True))
            ready = all(backend.workload_ready(deployment.namespace, name) for name in live)
        except NotFound as error:
            if _released_meanwhile(deployment, names):
                return WATCH_WAITING
            delete_workloads(backend, deployment.namespace, names)
            fail_deployment(deployment, f"a workload disappeared from the cluster ({error}); everything was released")
            return WATCH_FAILED
        if ready:
            with transaction.atomic():
                if transition(Deployment, deployment.pk, DeploymentStatus.PLACED, DeploymentStatus.RUNNING,
                              actor=SYSTEM_WATCHER, reason="every workload is ready", values={"message": "running"}):
                    Placement.objects.filter(deployment_id=deployment.pk, status=PlacementStatus.BINDING).update(
                        status=PlacementStatus.RUNNING)
            return WATCH_RUNNING
    started = deployment.placed_at or deployment.created_at
    if now - started < timeout:
        return WATCH_WAITING
    failures = delete_workloads(backend, deployment.namespace, names)
    if failures:
        raise ClusterError(f"could not delete the workloads of {deployment}: {'; '.join(failures)}")
    what = "its workloads were not ready" if deployment.status == DeploymentStatus.PLACED else "it was never placed"
    fail_deployment(deployment, f"{what} {settings.DEPLOYMENT_WATCH_TIMEOUT_S} s after placement; everything was "
                    "released", from_statuses=[deployment.status])
    return WATCH_FAILED


def _released_meanwhile(deployment: Deployment, names: list[str]) -> bool:
    """Whether a replica of ``deployment`` was released since ``names`` were read (a rolling
    update moving it off a node): its workload went with it, it did not vanish.

    ``release_replica`` holds the placement's row from before it removes the workload until the
    release commits: once these rows are locked here, a release is either done or not begun."""
    with transaction.atomic():
        list(Placement.objects.select_for_update().filter(deployment_id=deployment.pk, status__in=ACTIVE_PLACEMENT_STATUSES))
        return workload_names(deployment, active_only=True) != names


def _starting(deployment: Deployment) -> QuerySet[Placement]:
    """Its replicas whose workloads were created but not yet seen ready."""
    return Placement.objects.filter(deployment_id=deployment.pk, status=PlacementStatus.BINDING)


def _watch_extra_replicas(deployment: Deployment, backend: ClusterBackend, now: datetime) -> str:
    """A RUNNING deployment gained replicas (a copy pre-warmed elsewhere): it stays RUNNING, each
    new replica is marked running once its workload is ready. One not ready
    ``DEPLOYMENT_WATCH_TIMEOUT_S`` after it was placed, or whose workload vanished, is released
    alone: the deployment goes on serving from the others."""
    timeout = timedelta(seconds=settings.DEPLOYMENT_WATCH_TIMEOUT_S)
    waiting = False
    for placement in _starting(deployment).order_by("replica_index"):
        try:
            ready = bool(placement.workload_name) and backend.workload_ready(deployment.namespace,
                                                                             placement.workload_name)
        except NotFound:
            ready, placement.created_at = False, now - timeout  # vanished: give it up now
        if ready:
            with transaction.atomic():
                if Placement.objects.filter(pk=placement.pk, status=PlacementStatus.BINDING).update(
                        status=PlacementStatus.RUNNING):
                    record("placement.running", placement, actor=SYSTEM_WATCHER, reason="its workload is ready",
                           before={"status": PlacementStatus.BINDING.value},
                           after={"status": PlacementStatus.RUNNING.value})
        elif now - placement.created_at >= timeout:
            release_replica(deployment, placement.replica_index, user=SYSTEM_WATCHER, cluster=backend,
                            reason=f"its workload was not ready {settings.DEPLOYMENT_WATCH_TIMEOUT_S} s after "
                                   "placement; the deployment serves from its other replicas")
        else:
            waiting = True
    return WATCH_WAITING if waiting else WATCH_RUNNING


class OnePodListing:
    """A cluster whose ``list_gpu_pods`` is asked once and then answered from that listing."""

    def __init__(self, cluster: ClusterBackend) -> None:
        self._cluster = cluster
        self._pods: list[ClusterPod] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def list_gpu_pods(self) -> list[ClusterPod]:
        if self._pods is None:
            self._pods = self._cluster.list_gpu_pods()
        return self._pods


def sweep_deployments(now: datetime | None = None, *, cluster: ClusterBackend | None = None,
                      limit: int = SWEEP_BATCH) -> dict[int, str]:
    """Watch every pending or placed deployment, or running one with replicas starting, nobody has
    looked at for a watch interval.

    The safety net of the watch task: a watch that was never enqueued (the broker was down), or
    whose retries ran out, or whose worker died, still ends in RUNNING, or in FAILED with every
    GPU released after ``DEPLOYMENT_WATCH_TIMEOUT_S`` (``watch_deployment`` decides). "Nobody
    has looked" means ``watched_at`` (or, never watched, ``created_at``) is older than
    ``DEPLOYMENT_WATCH_INTERVAL_S`` before ``now``: deployments whose watch task is doing its
    job are left to it. At most ``limit``, stalest first. Returns deployment id -> the watch's
    outcome, "error" where the cluster failed (logged; the next sweep tries again).
    """
    now = now or timezone.now()
    stale_before = now - timedelta(seconds=settings.DEPLOYMENT_WATCH_INTERVAL_S)
    due = list(
        Deployment.objects.filter(Q(status__in=(DeploymentStatus.PENDING, DeploymentStatus.PLACED))
                                  | Q(status=DeploymentStatus.RUNNING, placements__status=PlacementStatus.BINDING)
                                  | Q(status=DeploymentStatus.RUNNING, origin=ORIGIN_WEBHOOK))
        .distinct()
        .annotate(last_look=Coalesce("watched_at", "created_at"))
        .filter(last_look__lte=stale_before)
        .order_by("last_look", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    if not due:
        return {}
    # Webhook-placed pods are looked for in one listing of GPU pods per sweep, not one per pod.
    backend = cast(ClusterBackend, OnePodListing(cluster if cluster is not None else get_cluster()))
    outcomes = {}
    for deployment_id in due:
        try:
            outcomes[deployment_id] = watch_deployment(deployment_id, cluster=backend, now=now)
        except ClusterError as error:
            logger.warning("sweep: could not watch deployment %s: %s", deployment_id, error)
            outcomes[deployment_id] = WATCH_ERROR
    return outcomes
