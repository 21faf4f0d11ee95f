"""Ingest: store a batch of typed samples and keep the latest values on GPU rows; the good samples
of a batch are stored, the bad ones are answered one by one.

Writers hand typed `SampleIn`s to `ingest_samples()` (the `POST /api/v1/telemetry/` endpoint,
which types them with `nodes.telemetry.batch`) or collector readings to
`nodes.telemetry.readings.store_readings()` (`poll_metrics_task`), which applies its own drop
policy and then writes through `write_samples()` here. Per-sample refusals come back in
`IngestResult.errors` (`nodes.telemetry.validation` describes their shape); a batch refused as a
whole is `TelemetryRejected`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from nodes.models import Node
from nodes.telemetry.partitions import ensure_partitions
from nodes.telemetry.samples import SampleIn
from nodes.telemetry.storage import (
    ResolvedGPU,
    insert_samples_ignoring_duplicates,
    resolve_gpus,
    update_latest_values,
)
from nodes.telemetry.validation import (
    TelemetryRejected,
    check_batch_size,
    check_source,
    unknown_gpu_only,
    validate_samples,
)


@dataclass(frozen=True)
class IngestResult:
    """`stored` new samples; `duplicates` already stored (same GPU and ts) or repeated in the batch;
    `errors` the refused samples' messages by batch index (str) and field; `retry` the indexes of
    those refused only because their GPU is not in the inventory yet (worth sending again later)."""

    stored: int
    duplicates: int
    errors: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    retry: tuple[int, ...] = ()

    @property
    def refused(self) -> int:
        """How many samples were refused."""
        return len(self.errors)


def ingest_samples(
    samples: Sequence[SampleIn],
    *,
    node: Node | None = None,
    source: str = "agent",
    now: datetime | None = None,
    indexes: Sequence[int] | None = None,
    refused: Mapping[str, dict[str, list[str]]] | None = None,
) -> IngestResult:
    """Store the good samples of a batch and refresh the latest values on their GPU rows; report the bad ones.

    Each sample is checked (`validate_samples`): an unknown GPU UUID; with `node`, a GPU of
    another node; a naive `ts`, one later than `now` + TELEMETRY_MAX_FUTURE_SKEW_S, or one older
    than the rollup retention (it would be deleted at once); a metric not finite, out of
    METRIC_RANGES or past its GPU's physical limits (nodes.telemetry.limits). The refused samples
    are left out and reported in the result's `errors` (by their index: `indexes[position]` when
    given, as the API passes the samples' places in the request), together with `refused`, the
    messages of samples the caller already refused (malformed JSON); the others are stored in
    one transaction (`write_samples`). One query resolves the UUIDs.

    Still raised, storing nothing: TelemetryRejected for more than settings.TELEMETRY_MAX_BATCH
    samples, or for a GPU deleted by inventory sync while the batch was written (the agent sends
    it again); ValueError for a `source` longer than GPUSample.source allows (a caller's bug).
    """
    check_source(source)
    now = now or timezone.now()
    check_batch_size(samples)
    errors = dict(refused or {})
    if samples:
        gpus = resolve_gpus({sample.gpu_uuid for sample in samples})
        bad = validate_samples(samples, gpus, node, now, indexes)
        errors.update(bad)
        if bad:
            names = [str(i) for i in indexes] if indexes is not None else [str(i) for i in range(len(samples))]
            samples = [sample for sample, name in zip(samples, names, strict=True) if name not in bad]
        written = write_samples(samples, gpus, source, copy=False)
    else:
        written = IngestResult(stored=0, duplicates=0)
    retry = tuple(sorted(int(index) for index, problems in errors.items() if unknown_gpu_only(problems)))
    ordered = dict(sorted(errors.items(), key=lambda item: int(item[0])))
    return IngestResult(stored=written.stored, duplicates=written.duplicates, errors=ordered, retry=retry)


def write_samples(
    samples: Sequence[SampleIn], gpus: Mapping[str, ResolvedGPU], source: str, *, copy: bool = True
) -> IngestResult:
    """Write samples already validated against `gpus` (every UUID among them); one transaction.

    One INSERT per INSERT_CHUNK_ROWS samples stores them, skipping (gpu, ts) pairs already stored
    (counted as duplicates, as are repeats inside the batch, so re-sending a batch stores nothing
    twice), and one executemany of conditional UPDATEs copies each GPU's newest sample of the
    batch onto its row: all LATEST_FIELDS (a metric the sample lacks becomes null, so the row
    never pairs an old figure with a new `sampled_at`) and `sampled_at`. Only GPUs whose row
    looked older in `gpus` are updated, and each UPDATE checks again in the database that the
    row's `sampled_at` is null or older, so a late or concurrent older batch never overwrites
    newer values. A GPU deleted since `gpus` was read makes the whole batch TelemetryRejected.
    On PostgreSQL the time partitions the samples need are made first (nodes.telemetry.partitions),
    and the rows are COPYed unless `copy` is False (an agent's few rows: one INSERT is cheaper).

    With Prometheus as the time-series store (settings.GPUPLANE_PROMETHEUS_URL) no sample rows are
    inserted: the database keeps only each GPU's latest values, which is all decisions (idle
    detection, /metrics, the overview) read, and Prometheus takes them from /metrics/dcgm.
    `stored` then counts the GPU rows brought up to date; the batch's other samples (older ones
    of a GPU, re-sent ones) count as duplicates.
    """
    if not samples:
        return IngestResult(stored=0, duplicates=0)
    # The newest sample of each GPU in this batch; repeats of one (gpu, ts) count once.
    newest: dict[int, SampleIn] = {}
    unique: dict[tuple[int, datetime], SampleIn] = {}
    for sample in samples:
        gpu_id = gpus[sample.gpu_uuid].id
        unique.setdefault((gpu_id, sample.ts), sample)
        current = newest.get(gpu_id)
        if current is None or sample.ts > current.ts:
            newest[gpu_id] = sample
    # Rows already newer than everything here need no UPDATE (a re-sent batch, a late agent).
    stale = {
        gpu_id: sample
        for gpu_id, sample in newest.items()
        if (sampled_at := gpus[sample.gpu_uuid].sampled_at) is None or sampled_at < sample.ts
    }

    history = not settings.GPUPLANE_PROMETHEUS_URL
    if history:
        # Before the write's transaction, so creating a partition (which locks the sample table)
        # is committed at once rather than held while the batch is written. PostgreSQL only.
        ensure_partitions({ts for _, ts in unique})
    try:
        with transaction.atomic():
            stored = insert_samples_ignoring_duplicates(unique, source, copy=copy) if history else len(stale)
            update_latest_values(stale)
    except IntegrityError as exc:
        # Only a GPU deleted by inventory sync between the check and the insert gets here.
        raise TelemetryRejected({"samples": ["A GPU of this batch was removed while it was being stored."]}) from exc
    return IngestResult(stored=stored, duplicates=len(samples) - stored)
