"""Celery tasks of rollouts: the reconciler's beat tick, thin (``rollouts.reconciler`` does the work)."""
from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from lifecycle.locks import single_run
from rollouts.reconciler import reconcile

logger = logging.getLogger(__name__)

RECONCILE_SOFT_TIME_LIMIT_S = 120
RECONCILE_TIME_LIMIT_S = 150
RECONCILE_LOCK_KEY = "gpuplane:rollouts:reconcile:lock"
# Longer than the hard limit: a worker killed mid-tick frees the lock only once its run is over.
RECONCILE_LOCK_TTL_S = RECONCILE_TIME_LIMIT_S + 30


@shared_task(name="rollouts.tasks.reconcile_rollouts_task", soft_time_limit=RECONCILE_SOFT_TIME_LIMIT_S,
             time_limit=RECONCILE_TIME_LIMIT_S)
def reconcile_rollouts_task() -> dict[str, Any]:
    """Advance every running rollout one step (beat, every ROLLOUT_RECONCILE_INTERVAL_S).

    Two ticks must not overlap (both would drive the same node step), so a tick first takes a
    ``single_run`` lock and returns {"skipped": True} when another holds it.
    """
    with single_run(RECONCILE_LOCK_KEY, ttl_s=RECONCILE_LOCK_TTL_S) as acquired:
        if not acquired:
            logger.info("rollout reconcile skipped: another tick is still running")
            return {"skipped": True, "reason": "another reconcile tick is running"}
        return reconcile()
