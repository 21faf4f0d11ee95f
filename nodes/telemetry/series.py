"""Time series for the charts: raw samples for recent ranges, rollup buckets for long ones.

Read by the series API (`nodes.api.series`); see `node_series` for the rule and the point shape.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from nodes.models import GPU, GPUSample, GPUSampleRollup, Node
from nodes.telemetry.buckets import Bucket, bucket_start, max_or_none, plausible_or_none, weighted_mean
from nodes.telemetry.samples import ROLLUP_FIELDS, plausible


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

    Whatever the table holds, every figure is a plausible finite number or None: a stored value
    no GPU could report (NaN, inf, 1.7e308 W, from before the telemetry bounds or written by SQL)
    reads as not measured (nodes.telemetry.samples.plausible), so one bad row never breaks a chart.
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
            values = zip(ROLLUP_FIELDS, metrics, strict=True)
            series[gpu_id].append({"ts": ts, **{name: v if plausible(name, v) else None for name, v in values}})
        return series

    bucket_s = settings.TELEMETRY_ROLLUP_BUCKET_S
    fresh: dict[tuple[int, datetime], Bucket] = defaultdict(Bucket)
    for gpu_id, ts, *metrics in raw:
        fresh[(gpu_id, bucket_start(ts, bucket_s))].add(dict(zip(ROLLUP_FIELDS, metrics, strict=True)))
    points: dict[tuple[int, datetime], dict[str, Any]] = {}
    for row in GPUSampleRollup.objects.filter(
        gpu_id__in=gpu_ids, bucket_start__gte=bucket_start(start, bucket_s), bucket_start__lte=end
    ):
        stored = {name: plausible_or_none(row, name) for name in ROLLUP_FIELDS}
        points[(row.gpu_id, row.bucket_start)] = _point(
            row.bucket_start,
            row.samples,
            {name: avg for name, (avg, _) in stored.items()},
            {name: maximum for name, (_, maximum) in stored.items()},
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
                {n: weighted_mean(rolled[n], total, bucket.avg(n), bucket.samples) for n in ROLLUP_FIELDS},
                {n: max_or_none(rolled[f"{n}_max"], bucket.maxima.get(n)) for n in ROLLUP_FIELDS},
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
