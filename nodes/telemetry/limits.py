"""Physical limits of one GPU's telemetry, from the catalog: what its board can really report.

Pure Python. `gpu_limits()` gives the highest value of each metric a given GPU may report;
`nodes.telemetry.validation` refuses a sample past them, so a garbled reading (1.7e308 W) is
never stored. METRIC_RANGES (nodes.telemetry.samples) still bounds every GPU, catalog or not.
"""
from __future__ import annotations

from dataclasses import dataclass

from nodes.catalog import CATALOG
from nodes.telemetry.samples import METRIC_RANGES

# Power may briefly read above the board's power limit (the limit is enforced over a window, and
# readings are noisy), never half as much again: a measured H100 SXM5 peaks at 699 W of 700 W.
POWER_MARGIN = 1.5
# SM clocks never pass the board's maximum boost clock; the margin allows for boards with a
# factory overclock.
CLOCK_MARGIN = 1.25


@dataclass(frozen=True)
class MetricLimit:
    """The highest value of one metric, and why, as a validation message puts it ("1.5 × the 700 W TDP")."""

    high: float
    reason: str


def gpu_limits(model_key: str, memory_mib: int) -> dict[str, MetricLimit]:
    """The upper limit of each bounded metric of a GPU of catalog model `model_key` with `memory_mib` of memory.

    Memory (used, reserved and total) is bounded by the GPU's memory: the larger of the inventory's figure
    and the catalog's, which NVML reports as the total. Power is bounded by POWER_MARGIN times the
    model's TDP (its power limit too), the SM clock by CLOCK_MARGIN times its maximum boost clock. A model the catalog
    does not know ("" or a new board) keeps METRIC_RANGES' bounds for power and clock.
    """
    model = CATALOG.get(model_key)
    memory = max(memory_mib, model.memory_mib if model else 0)
    limits = {
        "memory_used_mib": MetricLimit(memory, f"the GPU's memory ({memory} MiB)"),
        "memory_total_mib": MetricLimit(memory, f"the GPU's memory ({memory} MiB)"),
        "memory_reserved_mib": MetricLimit(memory, f"the GPU's memory ({memory} MiB)"),
    }
    if model is None:
        unknown = f"the bound for a GPU model the catalog does not know ({model_key or 'none'})"
        limits["power_w"] = MetricLimit(METRIC_RANGES["power_w"][1], unknown)
        limits["power_limit_w"] = limits["power_w"]
        limits["sm_clock_mhz"] = MetricLimit(METRIC_RANGES["sm_clock_mhz"][1], unknown)
        return limits
    limits["power_w"] = MetricLimit(
        round(model.tdp_w * POWER_MARGIN, 1), f"{POWER_MARGIN:g} × the {model.tdp_w} W TDP of {model.key}"
    )
    # A power limit can be set up to the board's maximum, which no board puts past this margin.
    limits["power_limit_w"] = limits["power_w"]
    limits["sm_clock_mhz"] = MetricLimit(
        round(model.max_sm_clock_mhz * CLOCK_MARGIN),
        f"{CLOCK_MARGIN:g} × the {model.max_sm_clock_mhz} MHz maximum clock of {model.key}",
    )
    return limits
