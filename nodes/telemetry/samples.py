"""What a telemetry sample is: its metrics, their accepted ranges, and the typed input to storage.

Pure Python (no Django): the node agent's side (`nodes.collectors.base`) builds `SampleIn`s
from its readings without a database.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

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
