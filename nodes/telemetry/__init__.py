"""Telemetry storage: ingest GPU samples, keep the latest values on GPU rows, roll up and expire.

Writers (the `POST /api/v1/telemetry/` endpoint, `poll_metrics_task`) hand typed `SampleIn`s to
`ingest_samples()`; the charts read `gpu_series()` / `node_series()`; `rollup_and_expire()` runs
periodically (`rollup_telemetry_task`).

Lifecycle of a sample (settings, DESIGN.md section 8):

- Raw `GPUSample` rows, unique per (gpu, ts), kept at least TELEMETRY_RAW_RETENTION_H (24 h).
- Then folded into `GPUSampleRollup` buckets of TELEMETRY_ROLLUP_BUCKET_S (300 s), aligned to
  the Unix epoch, kept TELEMETRY_ROLLUP_RETENTION_D (30 days).

Validation errors (`TelemetryRejected.errors`) have the shape of DRF's, so the API returns them
as they are::

    {"samples": ["At most 5000 samples per batch; got 5001."]}               # the batch as a whole
    {"samples": {"3": {"ts": ["is 600 s in the future (allowed skew 120 s)"]},  # sample index 3
                 "7": {"gpu_uuid": ["Unknown GPU 'GPU-x'."]}}}

`samples` maps the (string) index of each bad sample to its fields' messages.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Min
from django.db.models.constants import OnConflict
from django.utils import timezone

from nodes.models import GPU, GPUSample, GPUSampleRollup, Node

# Largest value a PositiveIntegerField holds on every supported database (PostgreSQL `integer`).
MAX_INT32 = 2**31 - 1

# Accepted range of each metric, inclusive; the API serializer declares the same bounds.
METRIC_RANGES: dict[str, tuple[float, float | None]] = {
    "utilization_pct": (0, 100),
    "memory_used_mib": (0, MAX_INT32),
    "memory_total_mib": (0, MAX_INT32),
    "power_w": (0, None),
    "temperature_c": (-50, 150),
    "sm_clock_mhz": (0, MAX_INT32),
}
METRIC_FIELDS: tuple[str, ...] = tuple(METRIC_RANGES)
# The metrics mirrored on GPU rows (GPU has no memory_total_mib / sm_clock_mhz columns).
LATEST_FIELDS: tuple[str, ...] = ("utilization_pct", "memory_used_mib", "power_w", "temperature_c")
# The metrics rolled up into buckets (avg and max of each).
ROLLUP_FIELDS: tuple[str, ...] = ("utilization_pct", "memory_used_mib", "power_w", "temperature_c")

# Rows per INSERT: keeps every statement under SQLite's 32,766 and PostgreSQL's 65,535 bound
# parameters (9 per row).
INSERT_CHUNK_ROWS = 1000
SOURCE_MAX_CHARS = GPUSample._meta.get_field("source").max_length
# Rollup works through a backlog this many buckets at a time (one transaction each), so a
# first run after a long pause never loads a whole day of samples at once.
ROLLUP_CHUNK_BUCKETS = 12


@dataclass(frozen=True)
class SampleIn:
    """One reading of one GPU, already typed. `ts` must be timezone-aware; None = not measured."""

    gpu_uuid: str
    ts: datetime
    utilization_pct: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None


@dataclass(frozen=True)
class IngestResult:
    """`stored` new samples; `duplicates` already stored (same GPU and ts) or repeated in the batch."""

    stored: int
    duplicates: int


class TelemetryRejected(Exception):
    """A batch that cannot be stored, with every reason found (see the module docstring for `errors`)."""

    def __init__(self, errors: dict[str, Any]) -> None:
        super().__init__(errors)
        self.errors = errors


@dataclass(frozen=True)
class RollupReport:
    """What one `rollup_and_expire()` run did."""

    cutoff: datetime  # raw samples before this were rolled up (a bucket boundary)
    samples_rolled_up: int  # raw samples folded into buckets, then deleted
    rollups_written: int  # bucket rows created or updated
    rollups_expired: int  # bucket rows deleted for being older than their retention

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cutoff": self.cutoff.isoformat()}


# --- ingest -------------------------------------------------------------------------------------


def ingest_samples(
    samples: Sequence[SampleIn],
    *,
    node: Node | None = None,
    source: str = "agent",
    now: datetime | None = None,
) -> IngestResult:
    """Store a batch of samples and refresh the latest values on their GPU rows; all or nothing.

    The whole batch is checked first, and every problem is reported at once as TelemetryRejected:
    more than settings.TELEMETRY_MAX_BATCH samples; an unknown GPU UUID; with `node`, a GPU of
    another node; a naive `ts`, one later than `now` + TELEMETRY_MAX_FUTURE_SKEW_S, or one older
    than the rollup retention (it would be deleted at once); a metric out of METRIC_RANGES or not
    finite. Nothing is written then.

    Otherwise: one query has resolved the UUIDs; then, in one transaction, one INSERT per
    INSERT_CHUNK_ROWS samples stores them, skipping (gpu, ts) pairs already stored (counted as
    duplicates, as are repeats inside the batch, so re-sending a batch stores nothing twice), and
    one executemany of conditional UPDATEs copies each GPU's newest sample of the batch onto its
    row: all LATEST_FIELDS (a metric the sample lacks becomes null, so the row never pairs an old
    figure with a new `sampled_at`) and `sampled_at`. Only GPUs whose row looked older are
    updated, and each UPDATE checks again in the database that the row's `sampled_at` is null or
    older, so a late or concurrent older batch never overwrites newer values.
    """
    if len(source) > SOURCE_MAX_CHARS:  # a caller's bug, not bad telemetry
        raise ValueError(f"source {source!r} is longer than {SOURCE_MAX_CHARS} characters")
    now = now or timezone.now()
    max_batch = settings.TELEMETRY_MAX_BATCH
    if len(samples) > max_batch:
        raise TelemetryRejected(
            {"samples": [f"At most {max_batch} samples per batch (TELEMETRY_MAX_BATCH); got {len(samples)}."]}
        )
    if not samples:
        return IngestResult(stored=0, duplicates=0)

    gpus = _resolve_gpus({sample.gpu_uuid for sample in samples})
    errors = _validate(samples, gpus, node, now)
    if errors:
        raise TelemetryRejected({"samples": errors})

    # The newest sample of each GPU in this batch; repeats of one (gpu, ts) count once.
    newest: dict[int, SampleIn] = {}
    unique: dict[tuple[int, datetime], SampleIn] = {}
    for sample in samples:
        gpu_id = gpus[sample.gpu_uuid][0]
        unique.setdefault((gpu_id, sample.ts), sample)
        current = newest.get(gpu_id)
        if current is None or sample.ts > current.ts:
            newest[gpu_id] = sample
    # Rows already newer than everything here need no UPDATE (a re-sent batch, a late agent).
    stale = {
        gpu_id: sample
        for gpu_id, sample in newest.items()
        if (sampled_at := gpus[sample.gpu_uuid][2]) is None or sampled_at < sample.ts
    }

    try:
        with transaction.atomic():
            stored = _insert_ignoring_duplicates(unique, source)
            _update_latest(stale)
    except IntegrityError as exc:
        # Only a GPU deleted by inventory sync between the check and the insert gets here.
        raise TelemetryRejected({"samples": ["A GPU of this batch was removed while it was being stored."]}) from exc
    return IngestResult(stored=stored, duplicates=len(samples) - stored)


def _resolve_gpus(uuids: Iterable[str]) -> dict[str, tuple[int, int, datetime | None]]:
    """uuid -> (gpu id, node id, sampled_at) for the GPUs that exist; one query."""
    rows = GPU.objects.filter(uuid__in=list(uuids)).values_list("uuid", "pk", "node_id", "sampled_at")
    return {uuid: (pk, node_id, sampled_at) for uuid, pk, node_id, sampled_at in rows}


def _validate(
    samples: Sequence[SampleIn],
    gpus: dict[str, tuple[int, int, datetime | None]],
    node: Node | None,
    now: datetime,
) -> dict[str, dict[str, list[str]]]:
    """Per sample index (as a string, as in JSON), per field: what is wrong with it."""
    skew_s = settings.TELEMETRY_MAX_FUTURE_SKEW_S
    latest_ok = now + timedelta(seconds=skew_s)
    retention_d = settings.TELEMETRY_ROLLUP_RETENTION_D
    earliest_ok = now - timedelta(days=retention_d)
    errors: dict[str, dict[str, list[str]]] = {}
    for index, sample in enumerate(samples):
        problems: dict[str, list[str]] = {}
        resolved = gpus.get(sample.gpu_uuid)
        if resolved is None:
            problems["gpu_uuid"] = [f"Unknown GPU {sample.gpu_uuid!r}."]
        elif node is not None and resolved[1] != node.pk:
            problems["gpu_uuid"] = [f"GPU {sample.gpu_uuid!r} is not a GPU of node {node.name!r}."]
        if not isinstance(sample.ts, datetime) or timezone.is_naive(sample.ts):
            problems["ts"] = ["must have a timezone (an ISO 8601 time with Z or an offset)"]
        elif sample.ts > latest_ok:
            ahead_s = math.ceil((sample.ts - now).total_seconds())
            problems["ts"] = [f"is {ahead_s} s in the future (allowed skew {skew_s} s)"]
        elif sample.ts < earliest_ok:
            problems["ts"] = [f"is older than the rollup retention ({retention_d} days)"]
        for name, (low, high) in METRIC_RANGES.items():
            value = getattr(sample, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                problems[name] = [f"must be a finite number; got {value!r}"]
            elif value < low or (high is not None and value > high):
                bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
                problems[name] = [f"must be {bounds}; got {value}"]
        if problems:
            errors[str(index)] = problems
    return errors


def _insert_ignoring_duplicates(rows: dict[tuple[int, datetime], SampleIn], source: str) -> int:
    """INSERT the rows, skipping (gpu, ts) pairs already stored; return how many were inserted.

    Django's bulk_create(ignore_conflicts=True) does not say how many rows it inserted, and the
    duplicate count is part of the API's answer; the statement's row count says it exactly, even
    when two identical batches race.
    """
    meta = GPUSample._meta
    fields = [meta.get_field(name) for name in ("gpu", "ts", *METRIC_FIELDS, "source")]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    ts_field = meta.get_field("ts")
    insert = connection.ops.insert_statement(on_conflict=OnConflict.IGNORE)
    suffix = connection.ops.on_conflict_suffix_sql(fields, OnConflict.IGNORE, None, None)

    values = [
        (
            gpu_id,
            ts_field.get_db_prep_save(ts, connection),
            *(getattr(sample, name) for name in METRIC_FIELDS),
            source,
        )
        for (gpu_id, ts), sample in rows.items()
    ]
    inserted = 0
    with connection.cursor() as cursor:
        for start in range(0, len(values), INSERT_CHUNK_ROWS):
            chunk = values[start : start + INSERT_CHUNK_ROWS]
            sql = f"{insert} {quote(meta.db_table)} ({columns}) VALUES {', '.join([row_sql] * len(chunk))} {suffix}"
            cursor.execute(sql, [value for row in chunk for value in row])
            inserted += cursor.rowcount
    return inserted


def _update_latest(newest: dict[int, SampleIn]) -> None:
    """Copy each GPU's sample onto its row, where the row's sampled_at is null or older.

    One conditional UPDATE per GPU, sent with executemany (PostgreSQL: pipelined, one round
    trip): the comparison with the row's current sampled_at happens inside each UPDATE, so the
    check and the write are one atomic step even when batches for the same GPU race. (A single
    bulk_update-style CASE statement costs several times more CPU to build through the ORM.)
    """
    if not newest:
        return
    meta = GPU._meta
    quote = connection.ops.quote_name
    sampled_at = meta.get_field("sampled_at")
    assignments = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in ("sampled_at", *LATEST_FIELDS))
    sampled_col = quote(sampled_at.column)
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {assignments} "
        f"WHERE {quote(meta.pk.column)} = %s AND ({sampled_col} IS NULL OR {sampled_col} < %s)"
    )
    params = []
    for gpu_id, sample in sorted(newest.items()):  # id order: concurrent batches lock rows alike
        ts = sampled_at.get_db_prep_save(sample.ts, connection)
        params.append((ts, *(getattr(sample, name) for name in LATEST_FIELDS), gpu_id, ts))
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


# --- rollup and retention -----------------------------------------------------------------------


def bucket_start(ts: datetime, bucket_s: int) -> datetime:
    """The start of the `bucket_s`-second bucket holding `ts`; buckets are aligned to the Unix epoch."""
    epoch_s = math.floor(ts.timestamp())
    return datetime.fromtimestamp(epoch_s - epoch_s % bucket_s, tz=UTC)


@dataclass
class _Bucket:
    """Running aggregate of one GPU over one bucket."""

    samples: int = 0
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    maxima: dict[str, float] = field(default_factory=dict)

    def add(self, values: dict[str, float | int | None]) -> None:
        self.samples += 1
        for name in ROLLUP_FIELDS:
            value = values[name]
            if value is None:
                continue
            self.sums[name] += value
            self.counts[name] += 1
            if name not in self.maxima or value > self.maxima[name]:
                self.maxima[name] = value

    def avg(self, name: str) -> float | None:
        return self.sums[name] / self.counts[name] if self.counts[name] else None


def _merged(avg_a: float | None, n_a: int, avg_b: float | None, n_b: int) -> float | None:
    """Mean of two means weighted by their sample counts; a missing side is ignored."""
    if avg_a is None:
        return avg_b
    if avg_b is None:
        return avg_a
    return (avg_a * n_a + avg_b * n_b) / (n_a + n_b)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def rollup_and_expire(now: datetime | None = None) -> RollupReport:
    """Fold expired raw samples into buckets, delete them, then delete expired buckets.

    `cutoff` is the start of the bucket holding `now` - TELEMETRY_RAW_RETENTION_H: every raw
    sample before it is rolled up, so a bucket is only rolled once it has wholly expired and raw
    samples are kept at least the retention window. Each chunk of ROLLUP_CHUNK_BUCKETS buckets is
    one transaction whose DELETE ... RETURNING hands back exactly the rows it removed, and those
    rows are what gets aggregated: every raw sample is counted exactly once, even when a late
    sample is inserted meanwhile or two runs overlap. So the function is idempotent: a second run
    with the same `now` finds nothing to roll up and changes nothing.

    A bucket row per (gpu, bucket_start) holds the sample count and, per ROLLUP_FIELDS metric,
    the mean and maximum of the samples that had it. A sample that arrives after its bucket was
    rolled up (an agent back from a long outage) is merged into the existing row: counts add,
    maxima combine, means are weighted by sample counts (exact when every sample had the metric).

    Finally, bucket rows starting before `now` - TELEMETRY_ROLLUP_RETENTION_D are deleted.
    """
    now = now or timezone.now()
    bucket_s = settings.TELEMETRY_ROLLUP_BUCKET_S
    cutoff = bucket_start(now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H), bucket_s)
    rolled_up = written = 0
    while True:
        with transaction.atomic():
            oldest = GPUSample.objects.filter(ts__lt=cutoff).aggregate(oldest=Min("ts"))["oldest"]
            if oldest is None:
                break
            chunk_end = min(cutoff, bucket_start(oldest, bucket_s) + timedelta(seconds=bucket_s * ROLLUP_CHUNK_BUCKETS))
            buckets = _delete_and_aggregate(chunk_end, bucket_s)
            rolled_up += sum(bucket.samples for bucket in buckets.values())
            written += _store_buckets(buckets, bucket_s)
    expired, _ = GPUSampleRollup.objects.filter(
        bucket_start__lt=now - timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_D)
    ).delete()
    return RollupReport(cutoff=cutoff, samples_rolled_up=rolled_up, rollups_written=written, rollups_expired=expired)


def _as_aware(value: datetime | str) -> datetime:
    """A timestamp read by raw SQL: PostgreSQL gives aware datetimes, SQLite naive UTC text."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)


def _delete_and_aggregate(before: datetime, bucket_s: int) -> dict[tuple[int, datetime], _Bucket]:
    """Delete raw samples older than `before` and aggregate exactly the deleted rows by (gpu, bucket)."""
    meta = GPUSample._meta
    quote = connection.ops.quote_name
    names = ("gpu", "ts", *ROLLUP_FIELDS)
    columns = ", ".join(quote(meta.get_field(name).column) for name in names)
    sql = (
        f"DELETE FROM {quote(meta.db_table)} WHERE {quote(meta.get_field('ts').column)} < %s RETURNING {columns}"
    )
    buckets: dict[tuple[int, datetime], _Bucket] = defaultdict(_Bucket)
    with connection.cursor() as cursor:
        cursor.execute(sql, [meta.get_field("ts").get_db_prep_value(before, connection)])
        for gpu_id, ts, *metrics in cursor.fetchall():
            key = (gpu_id, bucket_start(_as_aware(ts), bucket_s))
            buckets[key].add(dict(zip(ROLLUP_FIELDS, metrics, strict=True)))
    return buckets


def _store_buckets(buckets: dict[tuple[int, datetime], _Bucket], bucket_s: int) -> int:
    """Create bucket rows, merging into rows that already exist; return how many were written."""
    if not buckets:
        return 0
    starts = {start for _, start in buckets}
    existing = {
        (row.gpu_id, row.bucket_start): row
        for row in GPUSampleRollup.objects.filter(
            bucket_start__gte=min(starts), bucket_start__lte=max(starts), gpu_id__in={gpu_id for gpu_id, _ in buckets}
        )
    }
    to_create: list[GPUSampleRollup] = []
    to_update: list[GPUSampleRollup] = []
    for (gpu_id, start), bucket in buckets.items():
        row = existing.get((gpu_id, start))
        if row is None:
            row = GPUSampleRollup(gpu_id=gpu_id, bucket_start=start, bucket_s=bucket_s, samples=0)
            to_create.append(row)
        else:
            to_update.append(row)
        for name in ROLLUP_FIELDS:
            merged_avg = _merged(getattr(row, f"{name}_avg"), row.samples, bucket.avg(name), bucket.samples)
            setattr(row, f"{name}_avg", merged_avg)
            setattr(row, f"{name}_max", _max(getattr(row, f"{name}_max"), bucket.maxima.get(name)))
        row.samples += bucket.samples
    GPUSampleRollup.objects.bulk_create(to_create, batch_size=INSERT_CHUNK_ROWS)
    GPUSampleRollup.objects.bulk_update(
        to_update,
        ["samples", *(f"{name}_{kind}" for name in ROLLUP_FIELDS for kind in ("avg", "max"))],
        batch_size=INSERT_CHUNK_ROWS,
    )
    return len(to_create) + len(to_update)


# --- series for the charts ----------------------------------------------------------------------


def gpu_series(gpu: GPU, start: datetime, end: datetime, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """Points of one GPU between `start` and `end` (inclusive), oldest first. See `node_series`."""
    return _series([gpu.pk], start, end, now or timezone.now()).get(gpu.pk, [])


def node_series(
    node: Node, start: datetime, end: datetime, *, now: datetime | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Points of each GPU of `node` between `start` and `end`, keyed by GPU UUID (every GPU, [] without data).

    When `start` lies within the raw retention window (`now` - TELEMETRY_RAW_RETENTION_H), the
    points are the raw samples: {"ts", "utilization_pct", "memory_used_mib", "power_w",
    "temperature_c"}. Otherwise they are one point per rollup bucket (ts = bucket start), with
    the same keys holding the bucket means (memory rounded to whole MiB) plus "samples" and
    "<metric>_max"; the recent part of the range, not rolled up yet, is bucketed on the fly from
    the raw samples, so a long range has one resolution from end to end.
    """
    gpus = list(node.gpus.order_by("index").values_list("pk", "uuid"))
    series = _series([pk for pk, _ in gpus], start, end, now or timezone.now())
    return {uuid: series.get(pk, []) for pk, uuid in gpus}


def _series(gpu_ids: list[int], start: datetime, end: datetime, now: datetime) -> dict[int, list[dict[str, Any]]]:
    raw = (
        GPUSample.objects.filter(gpu_id__in=gpu_ids, ts__gte=start, ts__lte=end)
        .order_by("gpu_id", "ts")
        .values_list("gpu_id", "ts", *ROLLUP_FIELDS)
    )
    series: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if start >= now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H):
        for gpu_id, ts, *metrics in raw:
            series[gpu_id].append({"ts": ts, **dict(zip(ROLLUP_FIELDS, metrics, strict=True))})
        return series

    bucket_s = settings.TELEMETRY_ROLLUP_BUCKET_S
    fresh: dict[tuple[int, datetime], _Bucket] = defaultdict(_Bucket)
    for gpu_id, ts, *metrics in raw:
        fresh[(gpu_id, bucket_start(ts, bucket_s))].add(dict(zip(ROLLUP_FIELDS, metrics, strict=True)))
    points: dict[tuple[int, datetime], dict[str, Any]] = {}
    for row in GPUSampleRollup.objects.filter(
        gpu_id__in=gpu_ids, bucket_start__gte=bucket_start(start, bucket_s), bucket_start__lte=end
    ):
        points[(row.gpu_id, row.bucket_start)] = _point(
            row.bucket_start,
            row.samples,
            {name: getattr(row, f"{name}_avg") for name in ROLLUP_FIELDS},
            {name: getattr(row, f"{name}_max") for name in ROLLUP_FIELDS},
        )
    for (gpu_id, start_ts), bucket in fresh.items():
        rolled = points.get((gpu_id, start_ts))
        if rolled is None:
            avgs = {name: bucket.avg(name) for name in ROLLUP_FIELDS}
            maxima = {name: bucket.maxima.get(name) for name in ROLLUP_FIELDS}
            points[(gpu_id, start_ts)] = _point(start_ts, bucket.samples, avgs, maxima)
        else:  # a late sample not rolled up yet, next to its bucket's row
            total = rolled["samples"]
            points[(gpu_id, start_ts)] = _point(
                start_ts,
                total + bucket.samples,
                {n: _merged(rolled[n], total, bucket.avg(n), bucket.samples) for n in ROLLUP_FIELDS},
                {n: _max(rolled[f"{n}_max"], bucket.maxima.get(n)) for n in ROLLUP_FIELDS},
            )
    for (gpu_id, _), point in sorted(points.items()):
        series[gpu_id].append(point)
    return series


def _point(
    ts: datetime, samples: int, avgs: dict[str, float | None], maxima: dict[str, float | None]
) -> dict[str, Any]:
    point: dict[str, Any] = {"ts": ts, "samples": samples}
    for name in ROLLUP_FIELDS:
        point[name] = avgs[name]
        point[f"{name}_max"] = maxima[name]
    if point["memory_used_mib"] is not None:
        point["memory_used_mib"] = round(point["memory_used_mib"])
    return point
