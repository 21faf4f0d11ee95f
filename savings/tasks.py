"""Celery tasks of the savings app: a thin wrapper around savings.services.history."""
from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from lifecycle.locks import claim_slot, interval_slot
from savings.services.history import record_sample

logger = logging.getLogger(__name__)

RECORD_SLOT_KEY = "gpuplane:savings:record:{slot}"


@shared_task(name="savings.tasks.record_savings_task", soft_time_limit=60, time_limit=90)
def record_savings_task() -> dict[str, Any]:
    """Record one savings sample and expire old ones; beat sends it every SAVINGS_SAMPLE_INTERVAL_S.

    One sample per interval slot (lifecycle.locks.claim_slot): a second beat or a re-delivered
    message finds the slot claimed and returns {"skipped": True, ...} without recording, so the
    integrated GPU-hours never count an interval twice. Acknowledged early (no acks_late): a
    delivery again could only skip.
    """
    interval_s = settings.SAVINGS_SAMPLE_INTERVAL_S
    slot = interval_slot(interval_s)
    if not claim_slot(RECORD_SLOT_KEY.format(slot=slot), ttl_s=interval_s * 2 + 5):
        logger.info("savings sample skipped: slot %d was already recorded", slot)
        return {"skipped": True, "reason": "slot already recorded", "slot": slot}
    report = record_sample()
    return {**report.as_dict(), "slot": slot}
