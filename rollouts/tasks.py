"""Celery tasks of rollouts: the reconciler's beat tick, thin (``rollouts.reconciler`` does the work)."""
from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from lifecycle.locks import tick_lock
from rollouts.reconciler import reconcile

logger = logging.getLogger(__name__)

RECONCILE_SOFT_TIME_LIMIT_S = 120
RECONCILE_TIME_LIMIT_S = 150
RECONCILE_LOCK_KEY = "gpuplane:rollouts:reconcile:lock"
# The fallback cache lock's expiry (see lifecycle.locks.tick_lock): longer than the hard limit, so it
# changes hands only once its owner's run is over. On PostgreSQL a killed worker frees it at once.
RECONCILE_LOCK_TTL_S = RECONCILE_TIME_LIMIT_S + 30


@shared_task(name="rollouts.tasks.reconcile_rollouts_task", soft_time_limit=RECONCILE_SOFT_TIME_LIMIT_S,
             time_limit=RECONCILE_TIME_LIMIT_S, acks_late=True, reject_on_worker_lost=True)
def reconcile_rollouts_task() -> dict[str, Any]:
    """Advance every running rollout one step (beat, every ROLLOUT_RECONCILE_INTERVAL_S).

    Two ticks must not overlap (both would drive the same node step), so a tick first takes the
    ``tick_lock`` (released by the death of a killed worker) and returns {"skipped": True} when
    another holds it. Idempotent (every step persists its progress and each cluster call is safe
    to repeat), so it acknowledges late and a tick lost with its worker is delivered again,
    unless the beat entry's expiry has passed (then the next tick does the work).
    """
    with tick_lock(RECONCILE_LOCK_KEY, ttl_s=RECONCILE_LOCK_TTL_S) as acquired:
        if not acquired:
            logger.info("rollout reconcile skipped: another tick is still running")
            return {"skipped": True, "reason": "another reconcile tick is running"}
        return reconcile()
