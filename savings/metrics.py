"""The savings gauges on /metrics: gpuplane_savings_gpus, gpuplane_savings_usd_per_hour and
gpuplane_savings_kwh_per_hour, from the same figures as GET /api/v1/savings/ (unrounded)."""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from savings.services.current import current_savings


class SavingsCollector(Collector):
    """Savings against every GPU-requesting workload on whole GPUs, now (0 on an empty cluster)."""

    def collect(self) -> Iterator[Metric]:
        savings = current_savings()
        yield GaugeMetricFamily(
            "gpuplane_savings_gpus",
            "GPUs saved against every GPU-requesting workload on whole GPUs (baseline - GPUs holding anything).",
            value=savings.gpus_saved,
        )
        yield GaugeMetricFamily("gpuplane_savings_usd_per_hour", "Price of the GPUs saved, USD per hour.", value=savings.usd_per_hour)
        yield GaugeMetricFamily(
            "gpuplane_savings_kwh_per_hour", "Board power of the GPUs saved, kWh per hour.", value=savings.kwh_per_hour
        )
