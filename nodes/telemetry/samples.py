"""What a telemetry sample is: its metrics, their accepted ranges, and the typed input to storage.

Pure Python (no Django): the node agent's side (`nodes.collectors.base`) builds `SampleIn`s
from its readings without a database.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

# Largest value a PositiveIntegerField holds on every supported database (PostgreSQL `integer`).
MAX_INT32 = 2**31 - 1
# Bounds no GPU board passes, whatever its model (B200: 1000 W, L40S: 2520 MHz). A GPU of a
# catalog model is held to its own, tighter limits (nodes.telemetry.limits).
MAX_BOARD_POWER_W = 2000
MAX_SM_CLOCK_MHZ = 3500

# Accepted range of each metric for any GPU, inclusive; the API serializer declares the same bounds.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "utilization_pct": (0, 100),
    "memory_used_mib": (0, MAX_INT32),
    "memory_total_mib": (0, MAX_INT32),
    "memory_reserved_mib": (0, MAX_INT32),
    "power_w": (0, MAX_BOARD_POWER_W),
    "power_limit_w": (0, MAX_BOARD_POWER_W),
    "temperature_c": (-50, 150),
    "sm_clock_mhz": (0, MAX_SM_CLOCK_MHZ),
}
METRIC_FIELDS: tuple[str, ...] = tuple(METRIC_RANGES)
# The metrics that are whole numbers (the others are any finite number).
INTEGER_FIELDS: frozenset[str] = frozenset({"memory_used_mib", "memory_total_mib", "memory_reserved_mib", "sm_clock_mhz"})
# The metrics mirrored on GPU rows (GPU has no memory_total_mib / sm_clock_mhz columns).
LATEST_FIELDS: tuple[str, ...] = (
    "utilization_pct", "memory_used_mib", "memory_reserved_mib", "power_w", "power_limit_w", "temperature_c",
)
# Most compute processes one sample may list (a GPU runs at most 48 MPS clients; more is garbage).
MAX_PROCESSES = 256
# The metrics rolled up into buckets (avg and max of each).
ROLLUP_FIELDS: tuple[str, ...] = ("utilization_pct", "memory_used_mib", "power_w", "temperature_c")


def plausible(name: str, value: object) -> bool:
    """True when `value` is a finite number within METRIC_RANGES[name]: a figure some GPU could report.

    What validation admits always is; rows stored before these bounds, or written by hand, may
    not be, and readers (rollup, chart series) leave such values out rather than average them.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    low, high = METRIC_RANGES[name]
    # An int is compared as it is: math.isfinite would overflow converting a huge one to a float.
    return (isinstance(value, int) or math.isfinite(value)) and low <= value <= high


# One compute process: (pid, GPU memory it uses in MiB, None where the driver does not say).
Process = tuple[int, int | None]


@dataclass(frozen=True)
class SampleIn:
    """One reading of one GPU, already typed. `ts` must be timezone-aware; None = not measured.

    `memory_used_mib` excludes what the driver reserves (`memory_reserved_mib`, NVML memory info
    v2); `processes` is None when not reported, () when none runs.
    """

    gpu_uuid: str
    ts: datetime
    utilization_pct: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    memory_reserved_mib: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    processes: tuple[Process, ...] | None = None
