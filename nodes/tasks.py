"""Celery tasks of the inventory app: thin wrappers around nodes.inventory and the nodes.telemetry package.

Each beat task guards itself with lifecycle.locks (no overlap; the poll also once per interval)
and then calls one service.
"""
from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from lifecycle.locks import claim_slot, interval_slot, single_run
from nodes.collectors.backends import get_collector
from nodes.fleet import refresh_per_poll
from nodes.inventory.sync import sync_inventory
from nodes.telemetry.partitions import create_ahead
from nodes.telemetry.poll import store_poll
from nodes.telemetry.rollup import rollup_and_expire

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
    # Idempotent: a sync writes the differences between the cluster and the rows, so a run lost
    # with its worker is run again (after its lock's expiry).
    acks_late=True,
    reject_on_worker_lost=True,
)
def sync_inventory_task() -> dict[str, Any]:
    """Sync the inventory from the configured cluster; return the SyncReport as a dict.

    Runs from beat every GPUPLANE_INVENTORY_SYNC_INTERVAL_S. Two syncs must not overlap (the second
    would wait on the first's row locks, then redo the same work, or on a fresh cluster both
    would insert the same nodes), so a run first takes a `single_run` lock (lifecycle.locks); a
    run that finds it taken returns {"skipped": True} at once. ClusterError propagates: the run
    fails visibly and the next beat tick retries. A sync that changed something then refreshes
    the fleet pages' per-poll figures (nodes.fleet.refresh_per_poll).
    """
    with single_run(SYNC_LOCK_KEY, ttl_s=SYNC_LOCK_TTL_S) as acquired:
        if not acquired:
            logger.info("inventory sync skipped: another sync is still running")
            return {"skipped": True, "reason": "another inventory sync is running"}
        report = sync_inventory()
    if report.changed:  # a new audit event: the pages' figures are cold until computed again
        _refresh_pages("inventory sync")
    return report.as_dict()


def _refresh_pages(after: str) -> None:
    """Compute the fleet pages' per-poll figures now (nodes.fleet.refresh_per_poll), so that no
    request pays for them; a failure is logged and leaves the pages to compute them themselves."""
    try:
        refresh_per_poll()
    except Exception:  # the poll or sync itself succeeded: do not fail it for its pages
        logger.exception("refreshing the fleet pages' figures after the %s failed", after)


# --- Telemetry (docs/design.md section 8) ---------------------------------------------------------

POLL_SOFT_TIME_LIMIT_S = 20
POLL_TIME_LIMIT_S = 25
POLL_LOCK_KEY = "gpuplane:poll:running"
POLL_SLOT_KEY = "gpuplane:poll:{slot}"
ROLLUP_SOFT_TIME_LIMIT_S = 240
ROLLUP_TIME_LIMIT_S = 270
ROLLUP_LOCK_KEY = "gpuplane:telemetry:rollup:lock"


@shared_task(
    name="nodes.tasks.poll_metrics_task",
    soft_time_limit=POLL_SOFT_TIME_LIMIT_S,
    time_limit=POLL_TIME_LIMIT_S,
)
def poll_metrics_task() -> dict[str, Any]:
    """Read every GPU from settings.GPUPLANE_TELEMETRY_SOURCE and store the samples; return a summary.

    Beat sends it every TELEMETRY_POLL_INTERVAL_S. Two guards (lifecycle.locks):

    1. One effective run per interval slot (`interval_slot`): a second beat started by mistake,
       or a re-delivered message, finds the slot claimed and returns {"skipped": True, "reason":
       "slot already polled", ...} without reading anything, so two beats still give one poll
       per interval. So it acknowledges early (no acks_late): a delivery again could only skip.
    2. No overlap: a run still going (a slow Prometheus) holds a `single_run` lock that expires
       with the hard time limit; the next one returns {"skipped": True, "reason": "previous poll
       still running"}.

    The readings are stored TELEMETRY_POLL_SHARD_NODES nodes per transaction
    (`nodes.telemetry.poll.store_poll`), so the poll's size follows the fleet's without any one
    write growing with it, and a shard that cannot be written loses only its own nodes' interval
    (logged as an error, counted in `failed_shards` and `lost`). What is stored and what is left
    out is `nodes.telemetry.readings.store_readings`'s policy. CollectorUnavailable propagates: the
    run fails visibly in the worker log and the next slot tries again. Summary: the PollReport's
    keys (source, readings, stored, duplicates, unknown_gpus, empty, rejected, shards,
    failed_shards, lost), then slot. After storing, it refreshes the fleet pages' per-poll figures
    (nodes.fleet.refresh_per_poll), so the overview and /metrics show the new readings at once
    and no request pays for computing them.
    """
    interval_s = settings.TELEMETRY_POLL_INTERVAL_S
    slot = interval_slot(interval_s)
    collector = get_collector()
    if collector is None:
        return {"skipped": True, "reason": "GPUPLANE_TELEMETRY_SOURCE is none (agents push telemetry)", "slot": slot}

    # The claim outlives the slot, so a message delivered late in the slot still finds it.
    if not claim_slot(POLL_SLOT_KEY.format(slot=slot), ttl_s=interval_s * 2 + 5):
        logger.info("telemetry poll skipped: slot %d was already polled", slot)
        return {"skipped": True, "reason": "slot already polled", "slot": slot}
    with single_run(POLL_LOCK_KEY, ttl_s=POLL_TIME_LIMIT_S) as acquired:
        if not acquired:
            logger.info("telemetry poll skipped: the previous poll is still running")
            return {"skipped": True, "reason": "previous poll still running", "slot": slot}
        report = store_poll(collector.collect(), source=collector.name, shard_nodes=settings.TELEMETRY_POLL_SHARD_NODES)
    _refresh_pages("telemetry poll")
    summary = report.as_dict()
    summary["slot"] = slot
    if report.failed_shards:
        logger.error("telemetry poll slot %d: %d shard(s) not stored: %s", slot, report.failed_shards, summary)
    else:
        logger.info("telemetry poll slot %d: %s", slot, summary)
    return summary


@shared_task(
    name="nodes.tasks.rollup_telemetry_task",
    soft_time_limit=ROLLUP_SOFT_TIME_LIMIT_S,
    time_limit=ROLLUP_TIME_LIMIT_S,
    # Idempotent: rollup_and_expire rolls up what is not rolled up yet and deletes what has expired.
    acks_late=True,
    reject_on_worker_lost=True,
)
def rollup_telemetry_task() -> dict[str, Any]:
    """Roll expired raw samples into buckets and delete expired data (nodes.telemetry.rollup.rollup_and_expire).

    Beat sends it every 5 minutes. rollup_and_expire is idempotent, but two concurrent runs would
    repeat each other's scans, so a run that finds the previous one still going (its
    `single_run` lock) returns {"skipped": True}. Returns the RollupReport as a dict, plus
    `partitions_created`: on PostgreSQL it first creates the raw sample partitions of the next
    hours (nodes.telemetry.partitions.create_ahead), so polls rarely have to make one.
    """
    with single_run(ROLLUP_LOCK_KEY, ttl_s=ROLLUP_TIME_LIMIT_S) as acquired:
        if not acquired:
            logger.info("telemetry rollup skipped: the previous rollup is still running")
            return {"skipped": True, "reason": "previous rollup still running"}
        created = create_ahead(timezone.now())
        return {**rollup_and_expire().as_dict(), "partitions_created": created}
