"""Store one server-side poll of the whole fleet in shards of nodes, each its own bounded transaction.

A collector reads the whole fleet at once (one Prometheus query, one pass of the simulator), so a
poll of 40,000 GPUs hands in 40,000 readings. Storing them as one batch made the poll as large
as the fleet: it hit the API's TELEMETRY_MAX_BATCH (telemetry stopped above 5,000 GPUs), one
transaction held the write lock for the whole fleet, and one bad row lost every GPU's interval.
`store_poll` resolves the UUIDs once, then stores TELEMETRY_POLL_SHARD_NODES nodes at a time
through `store_readings` (one transaction each). A shard whose write fails is retried once with
the GPUs read again (a GPU deleted meanwhile is then simply unknown); if it fails again its
readings are counted as `lost` and the other shards are stored all the same. Re-storing a shard
is harmless: samples are unique per (GPU, ts), so a repeat counts as duplicates.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from nodes.collectors.base import GPUReading
from nodes.telemetry.readings import StoreReport, store_readings
from nodes.telemetry.storage import ResolvedGPU, resolve_gpus
from nodes.telemetry.validation import TelemetryRejected, check_source

logger = logging.getLogger(__name__)

# What a shard's write may fail with and be worth retrying: the database (a lock timeout, a lost
# connection) or a GPU deleted by inventory sync while the shard was written. Anything else is a
# bug, and the soft time limit must get through untouched.
SHARD_FAILURES: tuple[type[Exception], ...] = (DatabaseError, TelemetryRejected)


@dataclass(frozen=True)
class PollReport:
    """What `store_poll` did: StoreReport's counts summed over the shards, then the shards' outcome."""

    source: str
    readings: int
    stored: int
    duplicates: int
    unknown_gpus: int
    empty: int
    rejected: int
    shards: int  # shards stored or tried
    failed_shards: int  # shards whose write failed twice
    lost: int  # readings of the failed shards: not stored this interval

    def as_dict(self) -> dict[str, Any]:
        """The report as the poll task's result, keys in field order (StoreReport's keys first)."""
        return asdict(self)


def shard_readings(
    readings: Sequence[GPUReading], node_of: dict[str, int], shard_nodes: int
) -> list[list[GPUReading]]:
    """The readings grouped by node (`node_of`: GPU UUID -> node id), `shard_nodes` nodes a shard, in node id order.

    Readings of GPUs not in `node_of` (unknown to the inventory) form a group of their own, first,
    so they are counted once like any other left-out reading. A node's GPUs are never split
    between shards: its latest values are refreshed together.
    """
    if shard_nodes < 1:
        raise ValueError(f"shard_nodes must be at least 1; got {shard_nodes}")
    by_node: dict[int | None, list[GPUReading]] = defaultdict(list)
    for reading in readings:
        by_node[node_of.get(reading.gpu_uuid)].append(reading)
    shards: list[list[GPUReading]] = []
    if None in by_node:
        shards.append(by_node.pop(None))
    nodes = sorted(key for key in by_node if key is not None)
    for start in range(0, len(nodes), shard_nodes):
        shards.append([reading for node_id in nodes[start : start + shard_nodes] for reading in by_node[node_id]])
    return shards


def store_poll(
    readings: Sequence[GPUReading], *, source: str, shard_nodes: int, now: datetime | None = None
) -> PollReport:
    """Store one poll's readings `shard_nodes` nodes at a time; return the PollReport (module docstring).

    Every shard is validated against the same `now`, so a slow poll does not refuse its last
    shards' timestamps as being in the future differently from its first.
    """
    check_source(source)
    now = now or timezone.now()
    gpus = resolve_gpus({reading.gpu_uuid for reading in readings})
    node_of = {uuid: gpu.node_id for uuid, gpu in gpus.items()}
    shards = shard_readings(readings, node_of, shard_nodes)
    reports: list[StoreReport] = []
    failed = lost = 0
    for number, shard in enumerate(shards):
        report = _store_shard(shard, number, source=source, now=now, gpus=gpus)
        if report is None:
            failed += 1
            lost += len(shard)
        else:
            reports.append(report)
    return PollReport(
        source=source,
        readings=len(readings),
        stored=sum(report.stored for report in reports),
        duplicates=sum(report.duplicates for report in reports),
        unknown_gpus=sum(report.unknown_gpus for report in reports),
        empty=sum(report.empty for report in reports),
        rejected=sum(report.rejected for report in reports),
        shards=len(shards),
        failed_shards=failed,
        lost=lost,
    )


def _store_shard(
    shard: list[GPUReading], number: int, *, source: str, now: datetime, gpus: Mapping[str, ResolvedGPU]
) -> StoreReport | None:
    """Store one shard; on a failure retry once with the GPUs read again; None when both tries failed."""
    try:
        return store_readings(shard, source=source, now=now, gpus=gpus)
    except SHARD_FAILURES as first:
        logger.warning("telemetry poll shard %d (%d readings) failed, retrying once: %s", number, len(shard), first)
    try:
        return store_readings(shard, source=source, now=now)
    except SHARD_FAILURES:
        logger.exception("telemetry poll shard %d: %d readings not stored", number, len(shard))
        return None
