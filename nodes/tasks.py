"""Celery tasks of the inventory app: thin wrappers around nodes.inventory and nodes.telemetry."""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from nodes.collectors.base import Collector, get_collector
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU
from nodes.telemetry import TelemetryRejected, ingest_samples, rollup_and_expire

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


# --- Telemetry (DESIGN.md section 8) ---------------------------------------------------------

POLL_SOFT_TIME_LIMIT_S = 20
POLL_TIME_LIMIT_S = 25
POLL_LOCK_KEY = "gpuplane:poll:running"
POLL_SLOT_KEY = "gpuplane:poll:{slot}"
ROLLUP_SOFT_TIME_LIMIT_S = 240
ROLLUP_TIME_LIMIT_S = 270
ROLLUP_LOCK_KEY = "gpuplane:telemetry:rollup:lock"


def _release(key: str, token: str) -> None:
    # Release only our own lock: if ours expired and another run took it, leave theirs.
    if cache.get(key) == token:
        cache.delete(key)


@shared_task(
    name="nodes.tasks.poll_metrics_task",
    soft_time_limit=POLL_SOFT_TIME_LIMIT_S,
    time_limit=POLL_TIME_LIMIT_S,
)
def poll_metrics_task() -> dict[str, Any]:
    """Read every GPU from settings.GPUPLANE_TELEMETRY_SOURCE and store the samples; return a summary.

    Beat sends it every TELEMETRY_POLL_INTERVAL_S. Two guards, both `cache.add` (atomic on Redis,
    which every multi-host deployment uses; see settings.CACHES):

    1. One effective run per interval slot (slot = floor(unix time / interval)): a second beat
       started by mistake, or a re-delivered message, finds the slot claimed and returns
       {"skipped": True, "reason": "slot already polled", ...} without reading anything, so two
       beats still give one poll per interval.
    2. No overlap: a run still going (a slow Prometheus) holds a lock that expires with the hard
       time limit, released in `finally`; the next one returns {"skipped": True, "reason":
       "previous poll still running"}.

    Readings of GPUs the inventory does not know (yet) and readings without any metric (a lost
    GPU) are left out and counted; a reading the storage refuses (a value out of range) is
    dropped once and the rest stored. CollectorUnavailable propagates: the run fails visibly in
    the worker log and the next slot tries again. Summary keys: source, slot, readings, stored,
    duplicates, unknown_gpus, empty, rejected.
    """
    interval_s = settings.TELEMETRY_POLL_INTERVAL_S
    slot = int(time.time() // interval_s)
    collector = get_collector()
    if collector is None:
        return {"skipped": True, "reason": "GPUPLANE_TELEMETRY_SOURCE is none (agents push telemetry)", "slot": slot}

    token = uuid.uuid4().hex
    # The claim outlives the slot, so a message delivered late in the slot still finds it.
    if not cache.add(POLL_SLOT_KEY.format(slot=slot), token, timeout=interval_s * 2 + 5):
        logger.info("telemetry poll skipped: slot %d was already polled", slot)
        return {"skipped": True, "reason": "slot already polled", "slot": slot}
    if not cache.add(POLL_LOCK_KEY, token, timeout=POLL_TIME_LIMIT_S):
        logger.info("telemetry poll skipped: the previous poll is still running")
        return {"skipped": True, "reason": "previous poll still running", "slot": slot}
    try:
        summary = _poll(collector)
    finally:
        _release(POLL_LOCK_KEY, token)
    summary["slot"] = slot
    logger.info("telemetry poll slot %d: %s", slot, summary)
    return summary


def _poll(collector: Collector) -> dict[str, Any]:
    readings = collector.collect()
    with_metrics = [reading for reading in readings if reading.has_metrics]
    known = set(GPU.objects.filter(uuid__in=[r.gpu_uuid for r in with_metrics]).values_list("uuid", flat=True))
    samples = [reading.to_sample() for reading in with_metrics if reading.gpu_uuid in known]
    rejected = 0
    try:
        result = ingest_samples(samples, source=collector.name)
    except TelemetryRejected as exc:
        # Per-sample errors ({"samples": {"<index>": {...}}}): drop those and store the rest, so
        # one GPU's absurd value does not blank the whole fleet's charts. Anything else (the
        # batch as a whole) propagates.
        bad = exc.errors.get("samples")
        if not isinstance(bad, dict):
            raise
        logger.warning("telemetry poll: %d sample(s) refused and dropped: %s", len(bad), bad)
        rejected = len(bad)
        samples = [sample for index, sample in enumerate(samples) if str(index) not in bad]
        result = ingest_samples(samples, source=collector.name)
    return {
        "source": collector.name,
        "readings": len(readings),
        "stored": result.stored,
        "duplicates": result.duplicates,
        "unknown_gpus": len(with_metrics) - len(known),
        "empty": len(readings) - len(with_metrics),
        "rejected": rejected,
    }


@shared_task(
    name="nodes.tasks.rollup_telemetry_task",
    soft_time_limit=ROLLUP_SOFT_TIME_LIMIT_S,
    time_limit=ROLLUP_TIME_LIMIT_S,
)
def rollup_telemetry_task() -> dict[str, Any]:
    """Roll expired raw samples into buckets and delete expired data (nodes.telemetry.rollup_and_expire).

    Beat sends it every 5 minutes. rollup_and_expire is idempotent, but two concurrent runs would
    repeat each other's scans, so a run that finds the previous one still going returns
    {"skipped": True}. Returns the RollupReport as a dict.
    """
    token = uuid.uuid4().hex
    if not cache.add(ROLLUP_LOCK_KEY, token, timeout=ROLLUP_TIME_LIMIT_S):
        logger.info("telemetry rollup skipped: the previous rollup is still running")
        return {"skipped": True, "reason": "previous rollup still running"}
    try:
        return rollup_and_expire().as_dict()
    finally:
        _release(ROLLUP_LOCK_KEY, token)
