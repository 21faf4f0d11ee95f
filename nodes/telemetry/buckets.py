"""Time buckets of telemetry: epoch-aligned bucket starts and the running aggregate of one bucket.

Shared by the rollup (which stores buckets) and the chart series (which buckets the recent raw
samples on the fly), so both agree on boundaries and on how means combine. Pure Python.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodes.telemetry.samples import ROLLUP_FIELDS, plausible


def bucket_start(ts: datetime, bucket_s: int) -> datetime:
    """The start of the `bucket_s`-second bucket holding `ts`; buckets are aligned to the Unix epoch."""
    epoch_s = math.floor(ts.timestamp())
    return datetime.fromtimestamp(epoch_s - epoch_s % bucket_s, tz=UTC)


@dataclass
class Bucket:
    """Running aggregate of one GPU over one bucket: sample count, and per ROLLUP_FIELDS metric its mean and maximum."""

    samples: int = 0
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    maxima: dict[str, float] = field(default_factory=dict)
    skipped: int = 0  # values left out for not being plausible

    def add(self, values: dict[str, float | int | None]) -> None:
        """Count one sample; a metric it lacks (None) leaves that metric's mean and maximum alone.

        So does a value that no GPU could report (not `plausible`: NaN, inf, 1.7e308, out of
        METRIC_RANGES), counted in `skipped`: a row stored before the bounds existed, or written
        by hand, must not overflow a sum to inf nor drag a mean off the chart.
        """
        self.samples += 1
        for name in ROLLUP_FIELDS:
            value = values[name]
            if value is None:
                continue
            if not plausible(name, value):
                self.skipped += 1
                continue
            self.sums[name] += value
            self.counts[name] += 1
            if name not in self.maxima or value > self.maxima[name]:
                self.maxima[name] = value

    def avg(self, name: str) -> float | None:
        """The mean of metric `name` over the samples that had it; None when none had it."""
        return self.sums[name] / self.counts[name] if self.counts[name] else None


def weighted_mean(avg_a: float | None, n_a: int, avg_b: float | None, n_b: int) -> float | None:
    """Mean of two means weighted by their sample counts; a missing side is ignored."""
    if avg_a is None:
        return avg_b
    if avg_b is None:
        return avg_a
    return (avg_a * n_a + avg_b * n_b) / (n_a + n_b)


def max_or_none(a: float | None, b: float | None) -> float | None:
    """The larger of two optional maxima; None only when both are."""
    return b if a is None else a if b is None else max(a, b)


def plausible_or_none(row: Any, name: str) -> tuple[float | None, float | None]:
    """A rollup row's stored mean and maximum of metric `name`, each None unless `plausible`.

    Rows are read back as stored: one written before the telemetry bounds, or by SQL, may hold
    inf, NaN or 1.7e308, which would overflow a merged mean or break a chart's JSON.
    """
    avg, maximum = getattr(row, f"{name}_avg"), getattr(row, f"{name}_max")
    return (avg if plausible(name, avg) else None, maximum if plausible(name, maximum) else None)
