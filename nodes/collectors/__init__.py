"""Telemetry collectors behind one interface (see base.py).

Only the interface is imported here: `nodes.collectors.nvml` needs the NVIDIA driver's library
and `nodes.collectors.simulated` the ORM, so each is imported where it is used, and
`nodes.collectors.backends.get_collector()` picks the server's collector.
"""
from nodes.collectors.base import (
    Collector,
    CollectorUnavailable,
    GPUReading,
    MIGInstanceReading,
    ProcessReading,
)

__all__ = [
    "Collector",
    "CollectorUnavailable",
    "GPUReading",
    "MIGInstanceReading",
    "ProcessReading",
]
