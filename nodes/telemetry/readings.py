"""Store what a collector read: the server-side poll's path into telemetry storage.

Like an agent's batch through the API, a poll stores what it can; unlike the API, which names
each refused sample to the agent that sent it, a poll has nobody to tell, so it counts and logs
what it left out.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from nodes.collectors.base import GPUReading
from nodes.telemetry.ingest import write_samples
from nodes.telemetry.storage import ResolvedGPU, resolve_gpus
from nodes.telemetry.validation import check_source, validate_samples

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreReport:
    """What one `store_readings()` call did with a collector's readings."""

    source: str  # the collector's name, stored as GPUSample.source
    readings: int  # readings handed in
    stored: int  # new samples written (Prometheus as the store: GPU rows brought up to date)
    duplicates: int  # samples already stored (same GPU and ts)
    unknown_gpus: int  # readings of GPUs the inventory does not know (yet), left out
    empty: int  # readings without any metric (a lost GPU), left out
    rejected: int  # samples the storage refused (a value out of range), dropped

    def as_dict(self) -> dict[str, Any]:
        """The report as the poll task's result, keys in field order."""
        return asdict(self)


def store_readings(
    readings: Sequence[GPUReading],
    *,
    source: str,
    now: datetime | None = None,
    gpus: Mapping[str, ResolvedGPU] | None = None,
) -> StoreReport:
    """Store the readings a collector returned, leaving out what storage cannot take; return a StoreReport.

    The GPU table is read once, to resolve every UUID (not at all when the caller passes `gpus`,
    resolved already: `nodes.telemetry.poll` resolves a whole poll once and stores it in shards).
    Left out and counted: readings without any metric (`empty`), readings of GPUs the inventory
    does not know (`unknown_gpus`), and samples `validate_samples` refuses (`rejected`: a value out
    of range, a clock far off), which are logged with their reasons, so one GPU's absurd value
    does not blank the whole fleet's charts. The rest is written in one transaction
    (`write_samples`). TELEMETRY_MAX_BATCH does not apply: it bounds what one API request may
    send, not what the server's own poll stores (callers bound their batches, see
    `nodes.telemetry.poll`). Still raised: TelemetryRejected for a GPU deleted while the batch was
    written, and ValueError for a `source` too long for GPUSample.source.
    """
    check_source(source)
    with_metrics = [reading for reading in readings if reading.has_metrics]
    if gpus is None:
        gpus = resolve_gpus({reading.gpu_uuid for reading in with_metrics})
    known = [reading for reading in with_metrics if reading.gpu_uuid in gpus]
    samples = [reading.to_sample() for reading in known]
    refused = validate_samples(samples, gpus, None, now or timezone.now())
    if refused:
        logger.warning("telemetry from %s: %d sample(s) refused and dropped: %s", source, len(refused), refused)
        samples = [sample for index, sample in enumerate(samples) if str(index) not in refused]
    result = write_samples(samples, gpus, source)
    return StoreReport(
        source=source,
        readings=len(readings),
        stored=result.stored,
        duplicates=result.duplicates,
        unknown_gpus=len(with_metrics) - len(known),
        empty=len(readings) - len(with_metrics),
        rejected=len(refused),
    )
