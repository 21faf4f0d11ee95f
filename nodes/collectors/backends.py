"""Which collector the server polls: `get_collector()`, chosen by settings.GPUPLANE_TELEMETRY_SOURCE.

The factory lives beside the collectors, not in `nodes.collectors.base`: each collector imports
the reading types from base, so a factory there would make base and its collectors import each
other. The node agent never calls it (it reads NVML itself), so base stays free of Django.
"""
from __future__ import annotations

from nodes.collectors.base import Collector


def get_collector() -> Collector | None:
    """The collector poll_metrics_task uses, chosen by settings.GPUPLANE_TELEMETRY_SOURCE.

    "simulated" -> SimulatedCollector(settings.TELEMETRY_SIMULATION_SEED), "dcgm" ->
    DCGMPrometheusCollector(settings.GPUPLANE_PROMETHEUS_URL), "none" -> None (node agents push
    their NVML readings to the API instead; the server polls nothing). Any other value raises
    ValueError naming the valid ones, as does "dcgm" without GPUPLANE_PROMETHEUS_URL.
    """
    from django.conf import settings

    # Imported on demand: the simulated collector needs the ORM, which must not load before the
    # app registry is ready, and a server polling Prometheus never needs it.
    source = settings.GPUPLANE_TELEMETRY_SOURCE
    if source == "simulated":
        from nodes.collectors.simulated import SimulatedCollector

        return SimulatedCollector(seed=settings.TELEMETRY_SIMULATION_SEED)
    if source == "dcgm":
        from nodes.collectors.prometheus import DCGMPrometheusCollector

        if not settings.GPUPLANE_PROMETHEUS_URL:
            raise ValueError("GPUPLANE_TELEMETRY_SOURCE=dcgm reads DCGM metrics from Prometheus: set GPUPLANE_PROMETHEUS_URL")

        return DCGMPrometheusCollector(settings.GPUPLANE_PROMETHEUS_URL)
    if source == "none":
        return None
    raise ValueError(f"unknown GPUPLANE_TELEMETRY_SOURCE {source!r} (simulated, dcgm or none)")
