"""Rollup and retention: fold expired raw samples into buckets, delete expired buckets.

Lifecycle of a sample (settings, docs/design.md section 8):

- Raw `GPUSample` rows, unique per (gpu, ts), kept at least TELEMETRY_RAW_RETENTION_H (24 h).
- Then folded into `GPUSampleRollup` buckets of TELEMETRY_ROLLUP_BUCKET_S (300 s), aligned to
  the Unix epoch, kept TELEMETRY_ROLLUP_RETENTION_D (30 days).

`rollup_and_expire()` runs periodically (`rollup_telemetry_task`). On PostgreSQL the raw samples
are partitioned by time (nodes.telemetry.partitions): a partition wholly before the cutoff is
aggregated in the database and dropped whole; only rows in the default partition are deleted.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from nodes.models import GPUSample, GPUSampleRollup
from nodes.telemetry import partitions
from nodes.telemetry.buckets import Bucket, bucket_start, max_or_none, plausible_or_none, weighted_mean
from nodes.telemetry.samples import METRIC_RANGES, ROLLUP_FIELDS
from nodes.telemetry.storage import INSERT_CHUNK_ROWS

logger = logging.getLogger(__name__)

# Rollup works through a backlog this many buckets at a time (one transaction each), so a
# first run after a long pause never loads a whole day of samples at once.
ROLLUP_CHUNK_BUCKETS = 12


@dataclass(frozen=True)
class RollupReport:
    """What one `rollup_and_expire()` run did."""

    cutoff: datetime  # raw samples before this were rolled up (a bucket boundary)
    samples_rolled_up: int  # raw samples folded into buckets, then deleted
    rollups_written: int  # bucket rows created or updated
    rollups_expired: int  # bucket rows deleted for being older than their retention
    values_skipped: int = 0  # implausible stored values (inf, NaN, 1.7e308 W) left out of the buckets
    partitions_dropped: int = 0  # PostgreSQL: raw sample partitions rolled up and dropped whole

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (the task's result): `cutoff` in ISO 8601."""
        return {**asdict(self), "cutoff": self.cutoff.isoformat()}


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

    A stored value no GPU could report (NaN, inf, 1.7e308 W: rows from before the telemetry
    bounds, or written by SQL) is left out of its bucket as if not measured, counted in
    `values_skipped` and logged; an existing bucket row holding one is repaired the same way
    when merged into. A bucket's figures are therefore always plausible, finite numbers.

    On PostgreSQL (nodes.telemetry.partitions) every raw partition wholly before `cutoff` is
    first aggregated by the database and dropped, in one transaction that blocks writes to it,
    so its rows are counted exactly once too (`partitions_dropped`); a partition reaching past the
    cutoff is kept whole until it has expired entirely, and the row-by-row DELETE above only
    sees the default partition.

    Finally, bucket rows starting before `now` - TELEMETRY_ROLLUP_RETENTION_D are deleted.
    """
    now = now or timezone.now()
    bucket_s = settings.TELEMETRY_ROLLUP_BUCKET_S
    cutoff = bucket_start(now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H), bucket_s)
    rolled_up = written = skipped = dropped = 0
    for partition in partitions.sample_partitions():
        if partition.end > cutoff:
            break
        with transaction.atomic():
            partitions.lock_partition(partition.name)
            buckets = _aggregate_partition(partition.name, bucket_s)
            written += _store_buckets(buckets, bucket_s)
            partitions.drop_partition(partition.name)
        rolled_up += sum(bucket.samples for bucket in buckets.values())
        skipped += sum(bucket.skipped for bucket in buckets.values())
        dropped += 1
    table = partitions.DEFAULT_PARTITION if partitions.partitioned() else GPUSample._meta.db_table
    while True:
        with transaction.atomic():
            oldest = _oldest_before(table, cutoff)
            if oldest is None:
                break
            chunk_end = min(cutoff, bucket_start(oldest, bucket_s) + timedelta(seconds=bucket_s * ROLLUP_CHUNK_BUCKETS))
            buckets = _delete_and_aggregate(table, chunk_end, bucket_s)
            rolled_up += sum(bucket.samples for bucket in buckets.values())
            skipped += sum(bucket.skipped for bucket in buckets.values())
            written += _store_buckets(buckets, bucket_s)
    expired, _ = GPUSampleRollup.objects.filter(
        bucket_start__lt=now - timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_D)
    ).delete()
    if skipped:
        logger.warning("telemetry rollup: %d implausible stored value(s) left out of the buckets", skipped)
    return RollupReport(
        cutoff=cutoff, samples_rolled_up=rolled_up, rollups_written=written, rollups_expired=expired,
        values_skipped=skipped, partitions_dropped=dropped,
    )


def _as_aware(value: datetime | str) -> datetime:
    """A timestamp read by raw SQL: PostgreSQL gives aware datetimes, SQLite naive UTC text."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)


def _ts_param(value: datetime) -> object:
    return GPUSample._meta.get_field("ts").get_db_prep_value(value, connection)


def _oldest_before(table: str, before: datetime) -> datetime | None:
    """The oldest raw sample time in `table` earlier than `before`, or None."""
    quote = connection.ops.quote_name
    ts = quote(GPUSample._meta.get_field("ts").column)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MIN({ts}) FROM {quote(table)} WHERE {ts} < %s", [_ts_param(before)])
        oldest = cursor.fetchone()[0]
    return None if oldest is None else _as_aware(oldest)


def _delete_and_aggregate(table: str, before: datetime, bucket_s: int) -> dict[tuple[int, datetime], Bucket]:
    """Delete raw samples of `table` older than `before` and aggregate exactly the deleted rows by (gpu, bucket)."""
    meta = GPUSample._meta
    quote = connection.ops.quote_name
    names = ("gpu", "ts", *ROLLUP_FIELDS)
    columns = ", ".join(quote(meta.get_field(name).column) for name in names)
    sql = f"DELETE FROM {quote(table)} WHERE {quote(meta.get_field('ts').column)} < %s RETURNING {columns}"
    buckets: dict[tuple[int, datetime], Bucket] = defaultdict(Bucket)
    with connection.cursor() as cursor:
        cursor.execute(sql, [_ts_param(before)])
        for gpu_id, ts, *metrics in cursor.fetchall():
            key = (gpu_id, bucket_start(_as_aware(ts), bucket_s))
            buckets[key].add(dict(zip(ROLLUP_FIELDS, metrics, strict=True)))
    return buckets


def _aggregate_partition(name: str, bucket_s: int) -> dict[tuple[int, datetime], Bucket]:
    """PostgreSQL: a whole partition's samples aggregated by (gpu, bucket) in the database, as Buckets.

    Shipping every row to Python would cost the database store its point at fleet scale (an hour
    of 40,000 GPUs is 4.8 million rows). The sums, counts and maxima are Bucket.add's, with the
    same plausibility rule: a value outside METRIC_RANGES (NaN sorts above every number in
    PostgreSQL, so it is outside too) is left out and counted as skipped.
    """
    quote = connection.ops.quote_name
    selected = []
    for metric in ROLLUP_FIELDS:
        column = quote(GPUSample._meta.get_field(metric).column)
        low, high = METRIC_RANGES[metric]
        ok = f"{column} >= {low} AND {column} <= {high}"
        selected += [
            f"count({column}) FILTER (WHERE {ok})",
            f"sum({column}) FILTER (WHERE {ok})",
            f"max({column}) FILTER (WHERE {ok})",
            f"count({column}) FILTER (WHERE NOT ({ok}))",
        ]
    sql = (
        f"SELECT gpu_id, floor(extract(epoch FROM ts) / {int(bucket_s)})::bigint * {int(bucket_s)}, count(*), "
        f"{', '.join(selected)} FROM {quote(name)} GROUP BY 1, 2"
    )
    buckets: dict[tuple[int, datetime], Bucket] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql)
        for gpu_id, start_s, samples, *figures in cursor.fetchall():
            bucket = Bucket(samples=samples)
            for index, metric in enumerate(ROLLUP_FIELDS):
                count, total, maximum, skipped = figures[4 * index : 4 * index + 4]
                bucket.skipped += skipped
                if count:
                    bucket.counts[metric] = count
                    bucket.sums[metric] = float(total)
                    bucket.maxima[metric] = maximum
            buckets[(gpu_id, datetime.fromtimestamp(start_s, tz=UTC))] = bucket
    return buckets


def _store_buckets(buckets: dict[tuple[int, datetime], Bucket], bucket_s: int) -> int:
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
            stored_avg, stored_max = plausible_or_none(row, name)
            merged_avg = weighted_mean(stored_avg, row.samples, bucket.avg(name), bucket.samples)
            setattr(row, f"{name}_avg", merged_avg)
            setattr(row, f"{name}_max", max_or_none(stored_max, bucket.maxima.get(name)))
        row.samples += bucket.samples
    GPUSampleRollup.objects.bulk_create(to_create, batch_size=INSERT_CHUNK_ROWS)
    GPUSampleRollup.objects.bulk_update(
        to_update,
        ["samples", *(f"{name}_{kind}" for name in ROLLUP_FIELDS for kind in ("avg", "max"))],
        batch_size=INSERT_CHUNK_ROWS,
    )
    return len(to_create) + len(to_update)


