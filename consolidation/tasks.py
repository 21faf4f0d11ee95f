"""Celery tasks of consolidation, thin: the analysis (beat, every CONSOLIDATION_INTERVAL_S) and
the executor's tick (beat, every CONSOLIDATION_EXECUTE_INTERVAL_S)."""
from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from consolidation.analysis import run_analysis
from consolidation.approval import NotAllowed, approve, expire_stale
from consolidation.execution import advance_plans
from lifecycle.locks import claim_slot, interval_slot, tick_lock

logger = logging.getLogger(__name__)

EXECUTE_LOCK_KEY = "gpuplane:consolidation:execute:lock"
ANALYSE_SLOT_KEY = "gpuplane:consolidation:analyse:slot:{slot}"
EXECUTE_TIME_LIMIT_S = 150


@shared_task(name="consolidation.tasks.analyse_consolidation_task", soft_time_limit=120, time_limit=150)
def analyse_consolidation_task() -> dict[str, Any]:
    """Expire stale plans, then look for a consolidation; with GPUPLANE_AUTO_CONSOLIDATE (off by
    default) the plan is approved at once, else it waits for an admin.

    Once per analysis interval (``lifecycle.locks.claim_slot``): a second beat, or a message
    delivered again, finds the slot claimed and does nothing, so two beats never make two plans.
    For that reason it acknowledges early (no acks_late): a delivery again could only skip; an
    analysis lost with its worker is the next interval's."""
    interval_s = settings.CONSOLIDATION_INTERVAL_S
    slot = interval_slot(interval_s)
    if not claim_slot(ANALYSE_SLOT_KEY.format(slot=slot), ttl_s=interval_s * 2 + 5):
        return {"skipped": True, "reason": "slot already analysed", "slot": slot}
    expired = expire_stale()
    outcome = run_analysis()
    plan = outcome.plan
    if plan is not None and outcome.created and settings.AUTO_CONSOLIDATE:
        try:
            approve(plan, actor="auto-consolidate")
        except NotAllowed as refused:  # it collides with a plan still in flight: it waits for an admin
            logger.info("auto-consolidate left plan %s proposed: %s", plan.pk, refused)
    return {"expired": expired, "plan": plan.pk if plan else None, "created": outcome.created,
            "superseded": list(outcome.superseded), "slot": slot}


@shared_task(name="consolidation.tasks.execute_consolidations_task", soft_time_limit=120,
             time_limit=EXECUTE_TIME_LIMIT_S, acks_late=True, reject_on_worker_lost=True)
def execute_consolidations_task() -> dict[str, Any]:
    """Advance approved and executing plans; ticks never overlap (both would place replacements).

    Idempotent (each move persists its replica index before placing, and adopts what a dead tick
    placed), so it acknowledges late: a tick lost with its worker is delivered again."""
    with tick_lock(EXECUTE_LOCK_KEY, ttl_s=EXECUTE_TIME_LIMIT_S + 30) as acquired:
        if not acquired:
            return {"skipped": True, "reason": "another consolidation tick is running"}
        return advance_plans()
