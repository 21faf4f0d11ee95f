"""Telemetry collectors behind one interface (see base.py).

Only the interface is imported here: `nodes.collectors.nvml` needs the NVIDIA driver's library
and `nodes.collectors.simulated` the ORM, so each is imported where it is used.
"""
from nodes.collectors.base import (
    Collector,
    CollectorUnavailable,
    GPUReading,
    MIGInstanceReading,
    ProcessReading,
    get_collector,
)

__all__ = [
    "Collector",
    "CollectorUnavailable",
    "GPUReading",
    "MIGInstanceReading",
    "ProcessReading",
    "get_collector",
]
