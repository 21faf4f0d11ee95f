"""Celery tasks of the inventory app: thin wrappers around nodes.services."""
from __future__ import annotations

import logging
import uuid
from typing import Any

from celery import shared_task
from django.core.cache import cache

from nodes.services import sync_inventory

logger = logging.getLogger(__name__)

SYNC_SOFT_TIME_LIMIT_S = 60
SYNC_TIME_LIMIT_S = 90
SYNC_LOCK_KEY = "gpuplane:nodes:sync-inventory:lock"
# Longer than the hard time limit, so a worker killed mid-sync frees the lock by expiry only
# after its run is certainly over.
SYNC_LOCK_TTL_S = SYNC_TIME_LIMIT_S + 30


@shared_task(
    name="nodes.tasks.sync_inventory_task",
    soft_time_limit=SYNC_SOFT_TIME_LIMIT_S,
    time_limit=SYNC_TIME_LIMIT_S,
)
def sync_inventory_task() -> dict[str, Any]:
    """Sync the inventory from the configured cluster; return the SyncReport as a dict.

    Runs from beat every GPUPLANE_INVENTORY_SYNC_INTERVAL_S. Two syncs must not overlap (the second
    would wait on the first's row locks, then redo the same work, or on a fresh cluster both
    would insert the same nodes), so a run first claims a lock with `cache.add`, which is atomic
    on every Django cache backend; a run that finds it taken returns {"skipped": True} at once.
    The lock spans what the configured cache spans: every worker process and host with a shared
    cache (Redis, Memcached, database), only the current process with the default local-memory
    cache. ClusterError propagates: the run fails visibly and the next beat tick retries.
    """
    token = uuid.uuid4().hex
    if not cache.add(SYNC_LOCK_KEY, token, timeout=SYNC_LOCK_TTL_S):
        logger.info("inventory sync skipped: another sync is still running")
        return {"skipped": True, "reason": "another inventory sync is running"}
    try:
        return sync_inventory().as_dict()
    finally:
        # Release only our own lock: if ours expired and another run took it, leave theirs.
        if cache.get(SYNC_LOCK_KEY) == token:
            cache.delete(SYNC_LOCK_KEY)
