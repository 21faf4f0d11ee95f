"""Celery tasks of consolidation, thin: the analysis (beat, every CONSOLIDATION_INTERVAL_S) and
the executor's tick (beat, every CONSOLIDATION_EXECUTE_INTERVAL_S)."""
from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from consolidation.analysis import analyse
from consolidation.approval import approve, expire_stale
from consolidation.execution import advance_plans
from lifecycle.locks import tick_lock

logger = logging.getLogger(__name__)

EXECUTE_LOCK_KEY = "gpuplane:consolidation:execute:lock"
EXECUTE_TIME_LIMIT_S = 150


@shared_task(name="consolidation.tasks.analyse_consolidation_task", soft_time_limit=120, time_limit=150)
def analyse_consolidation_task() -> dict[str, Any]:
    """Expire stale plans, then look for a consolidation; with GPUPLANE_AUTO_CONSOLIDATE (off by
    default) the plan is approved at once, else it waits for an admin."""
    expired = expire_stale()
    plan = analyse(store_empty=False)
    if plan is not None and settings.AUTO_CONSOLIDATE:
        approve(plan, actor="auto-consolidate")
    return {"expired": expired, "plan": plan.pk if plan else None}


@shared_task(name="consolidation.tasks.execute_consolidations_task", soft_time_limit=120,
             time_limit=EXECUTE_TIME_LIMIT_S)
def execute_consolidations_task() -> dict[str, Any]:
    """Advance approved and executing plans; ticks never overlap (both would place replacements)."""
    with tick_lock(EXECUTE_LOCK_KEY, ttl_s=EXECUTE_TIME_LIMIT_S + 30) as acquired:
        if not acquired:
            return {"skipped": True, "reason": "another consolidation tick is running"}
        return advance_plans()
