"""Celery tasks of the scheduler: thin wrappers around ``scheduler.services``."""
from __future__ import annotations

import math

from celery import shared_task
from django.conf import settings

from nodes.cluster.base import ClusterError
from scheduler import services

WATCH_SOFT_TIME_LIMIT_S = 60
WATCH_TIME_LIMIT_S = 90
# The timeout itself is measured in the service (from the deployment's placed_at), so retries
# are only a backstop: enough of them to outlast the timeout with room for slow workers.
WATCH_MAX_RETRIES = math.ceil(settings.DEPLOYMENT_WATCH_TIMEOUT_S / settings.DEPLOYMENT_WATCH_INTERVAL_S) + 10


class WorkloadNotReady(Exception):
    """The deployment's workloads are not ready yet: look again after the watch interval."""


@shared_task(
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
)
def watch_deployment_task(deployment_id: int) -> str:
    """Watch a deployment until its workloads run: "running", "failed", or the status it has.

    Takes the id and re-reads the row each run (a deleted deployment returns "gone"). While the
    workloads are not ready it retries every ``DEPLOYMENT_WATCH_INTERVAL_S``; after
    ``DEPLOYMENT_WATCH_TIMEOUT_S`` the service deletes them, releases the GPUs and marks the
    deployment FAILED. A ClusterError (the cluster unreachable) is retried the same way.
    """
    outcome = services.watch_deployment(deployment_id)
    if outcome == services.WATCH_WAITING:
        raise WorkloadNotReady(f"deployment {deployment_id}: workloads not ready yet")
    return outcome
