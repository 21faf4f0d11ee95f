"""The latest per-GPU readings gpuplane holds, in NVIDIA DCGM exporter's exposition format.

Served at `/metrics/dcgm` (gpuplane.observability) for Prometheus to scrape where DCGM's exporter
does not run: the simulated cluster's collector, or node agents pushing to the API. Metric and
label names are the exporter's (`gpu`, `UUID`, `device`, `modelName`, `Hostname`), so charts,
dashboards and gpuplane's own series queries (nodes.telemetry.prometheus) read both alike.
`modelName` is gpuplane's catalog key (the exporter's is the NVML product name).

Each sample carries the time it was taken (GPU.sampled_at) as its timestamp: Prometheus then
stores a poll's values at the poll's time whenever it scrapes them, scraping the same values
again adds nothing, and a GPU that stopped reporting is not recorded as if it still read the same.
Only what a GPU row holds is exported: utilization, framebuffer used and free (the GPU's memory
less used), power and temperature (no SM clock).

With GPUPLANE_TELEMETRY_SOURCE=dcgm the readings came from Prometheus in the first place, so
nothing is exported: Prometheus would hold every GPU twice.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.conf import settings

from nodes.collectors.prometheus import (
    METRIC_FB_FREE,
    METRIC_FB_USED,
    METRIC_POWER,
    METRIC_TEMPERATURE,
    METRIC_UTILIZATION,
)
from nodes.models import GPU

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# (metric, HELP text as DCGM exporter's default counters word it)
FAMILIES: tuple[tuple[str, str], ...] = (
    (METRIC_UTILIZATION, "GPU utilization (in %)."),
    (METRIC_FB_USED, "Framebuffer memory used (in MiB)."),
    (METRIC_FB_FREE, "Framebuffer memory free (in MiB)."),
    (METRIC_POWER, "Power draw (in W)."),
    (METRIC_TEMPERATURE, "GPU temperature (in C)."),
)


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float | int) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def dcgm_exposition() -> str:
    """Every GPU with telemetry, one line per metric it has, grouped by metric family (one query)."""
    if settings.GPUPLANE_TELEMETRY_SOURCE == "dcgm":
        return "# GPUPLANE_TELEMETRY_SOURCE=dcgm: these GPUs' series are DCGM exporter's own.\n"
    rows = list(
        GPU.objects.filter(sampled_at__isnull=False)
        .order_by("node__name", "index")
        .values_list(
            "node__name", "index", "uuid", "model", "memory_mib",
            "utilization_pct", "memory_used_mib", "power_w", "temperature_c", "sampled_at",
        )
    )
    return "".join(_lines(rows))


def _lines(rows: list[tuple[str, int, str, str, int, float | None, int | None, float | None, float | None, datetime]]) -> Iterator[str]:
    labelled = []
    for hostname, index, uuid, model, memory_mib, utilization, used, power, temperature, sampled_at in rows:
        labels = (
            f'{{gpu="{index}",UUID="{_label_value(uuid)}",device="nvidia{index}",'
            f'modelName="{_label_value(model)}",Hostname="{_label_value(hostname)}"}}'
        )
        free = None if used is None else max(0, memory_mib - used)
        values = dict(zip((name for name, _ in FAMILIES), (utilization, used, free, power, temperature), strict=True))
        labelled.append((labels, values, round(sampled_at.timestamp() * 1000)))
    for metric, help_text in FAMILIES:
        yield f"# HELP {metric} {help_text}\n# TYPE {metric} gauge\n"
        for labels, values, timestamp_ms in labelled:
            value = values[metric]
            if value is not None:
                yield f"{metric}{labels} {_number(value)} {timestamp_ms}\n"
