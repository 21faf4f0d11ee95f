"""Celery tasks of the scheduler: thin wrappers around ``scheduler.services``."""
from __future__ import annotations

import math
from collections import Counter

from celery import Task, shared_task
from django.conf import settings

from lifecycle.locks import tick_lock
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterError
from scheduler import services
from scheduler.services import moving
from scheduler.services.own_pdbs import sync_pdbs
from scheduler.services.snapshots import trim_changes
from scheduler.services.workload_mix import refresh_workload_mix

WATCH_SOFT_TIME_LIMIT_S = 60
WATCH_TIME_LIMIT_S = 90
# The timeout itself is measured in the service (from the deployment's placed_at), so retries
# are only a backstop: enough of them to outlast the timeout with room for slow workers.
WATCH_MAX_RETRIES = math.ceil(settings.DEPLOYMENT_WATCH_TIMEOUT_S / settings.DEPLOYMENT_WATCH_INTERVAL_S) + 10
# A sweep looks at up to services.SWEEP_BATCH deployments, a few cluster calls each.
SWEEP_SOFT_TIME_LIMIT_S = 120
SWEEP_TIME_LIMIT_S = 150


class WorkloadNotReady(Exception):
    """The deployment's workloads are not ready yet: look again after the watch interval."""


@shared_task(
    bind=True,
    name="scheduler.tasks.watch_deployment_task",
    autoretry_for=(WorkloadNotReady, ClusterError),
    retry_backoff=False,
    retry_jitter=False,
    default_retry_delay=settings.DEPLOYMENT_WATCH_INTERVAL_S,
    max_retries=WATCH_MAX_RETRIES,
    soft_time_limit=WATCH_SOFT_TIME_LIMIT_S,
    time_limit=WATCH_TIME_LIMIT_S,
    # Idempotent (the service re-reads the row and moves its state with conditional updates), so
    # a run lost with its worker may safely run again.
    acks_late=True,
    reject_on_worker_lost=True,
)
def watch_deployment_task(self: Task, deployment_id: int) -> str:
    """Watch a deployment until its workloads run: "running", "failed", or the status it has.

    Takes the id and re-reads the row each run (a deleted deployment returns "gone"). While the
    workloads are not ready it retries every ``DEPLOYMENT_WATCH_INTERVAL_S``; after
    ``DEPLOYMENT_WATCH_TIMEOUT_S`` the service deletes them, releases the GPUs and marks the
    deployment FAILED. A ClusterError (the cluster unreachable) is retried the same way. With
    ``CELERY_TASK_ALWAYS_EAGER`` it looks once and returns "waiting": eager retries ignore
    their countdown and would spin inside the deploy request. Whatever stops the retries,
    ``sweep_deployments_task`` looks again.
    """
    outcome = services.watch_deployment(deployment_id)
    if outcome == services.WATCH_WAITING:
        if self.app.conf.task_always_eager:
            return outcome
        raise WorkloadNotReady(f"deployment {deployment_id}: workloads not ready yet")
    return outcome


@shared_task(
    name="scheduler.tasks.sweep_deployments_task",
    soft_time_limit=SWEEP_SOFT_TIME_LIMIT_S,
    time_limit=SWEEP_TIME_LIMIT_S,
    # Idempotent: every look is a watch (conditional updates); a run lost with its worker is run again.
    acks_late=True,
    reject_on_worker_lost=True,
)
def sweep_deployments_task() -> dict[str, int]:
    """Watch the pending and placed deployments nobody looked at for a watch interval.

    Runs from beat every 30 s (``services.sweep_deployments`` holds the logic); returns how many
    deployments came to each outcome, e.g. {"running": 2, "waiting": 1}. Overlapping sweeps are
    harmless: every look is idempotent. Also trims the snapshot's change log (``snapshots.RETENTION``).
    """
    trim_changes()
    return dict(Counter(services.sweep_deployments().values()))


@shared_task(name="scheduler.tasks.refresh_workload_mix_task", soft_time_limit=60, time_limit=90)
def refresh_workload_mix_task() -> dict[str, int]:
    """Recompute the observed workload mix for the packing plugins (``services.workload_mix``).

    Runs from beat every ``WORKLOAD_MIX_INTERVAL_S``; idempotent (the last run's mix wins).
    Returns how many typical pods, planned GPU contents and placements it found (zeros when
    there were too few placements for a mix).
    """
    mix = refresh_workload_mix()
    if mix is None:
        return {"typical_pods": 0, "patterns": 0, "placements": 0}
    return {"typical_pods": len(mix.typical_pods), "patterns": len(mix.patterns), "placements": mix.placements}


MOVES_LOCK_KEY = moving.MOVER_LOCK  # preemption advances its removals under it too
MOVES_TIME_LIMIT_S = 150


@shared_task(name="scheduler.tasks.advance_moves_task", soft_time_limit=120, time_limit=MOVES_TIME_LIMIT_S,
             acks_late=True, reject_on_worker_lost=True)
def advance_moves_task() -> dict[str, object]:
    """The mover's tick (beat, every MOVE_INTERVAL_S): gpuplane's own PodDisruptionBudgets brought
    in line with the deployments, then every move in flight one step further.

    Ticks never overlap (two would place two replacements). Idempotent (each move persists its
    replica index before placing and adopts what a dead tick placed), so it acknowledges late: a
    tick lost with its worker is delivered again."""
    with tick_lock(MOVES_LOCK_KEY, ttl_s=MOVES_TIME_LIMIT_S + 30) as acquired:
        if not acquired:
            return {"skipped": True, "reason": "another mover tick is running"}
        cluster = get_cluster()
        try:
            pdbs: dict[str, object] = dict(sync_pdbs(cluster))
        except ClusterError as error:  # the moves go on: a budget already there is honoured anyway
            pdbs = {"error": str(error)}
        return {"pdbs": pdbs, **moving.advance_moves(cluster=cluster)}


@shared_task(name="scheduler.tasks.autoscale_deployments_task", soft_time_limit=120, time_limit=150)
def autoscale_deployments_task() -> dict[str, int]:
    """Sample every autoscaled deployment, learn from it and apply its policy
    (``services.autoscaling.autoscale_all``); runs from beat every ``AUTOSCALE_INTERVAL_S``.
    Returns how many evaluations ended how (applied, held, no-decision, ...)."""
    from scheduler.services.autoscaling import autoscale_all

    return autoscale_all()
