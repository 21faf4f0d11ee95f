"""Chart series from Prometheus, the time-series store when settings.GPUPLANE_PROMETHEUS_URL is set.

The series are read with Prometheus' HTTP API `query_range` under NVIDIA DCGM exporter's metric
and label names, so a user's existing dcgm-exporter data is charted as it is, and what gpuplane
exposes itself (`/metrics/dcgm`, nodes.telemetry.exposition) is read the same way. The mapping
to the chart's fields, in this one place:

| chart field      | DCGM metric             | across the series of one `UUID`            |
|------------------|-------------------------|--------------------------------------------|
| utilization_pct  | DCGM_FI_DEV_GPU_UTIL    | mean over MIG instances (`GPU_I_ID`)       |
| memory_used_mib  | DCGM_FI_DEV_FB_USED     | sum over MIG instances                     |
| power_w          | DCGM_FI_DEV_POWER_USAGE | maximum (device-wide)                      |
| temperature_c    | DCGM_FI_DEV_GPU_TEMP    | maximum (device-wide)                      |

Per (UUID, GPU_I_ID) the maximum is taken first, so the same GPU scraped by two jobs (two
`instance` labels) is counted once, not summed twice.

Resolution follows the database series' rule (nodes.api.series.resolution_for): a range that
starts inside the raw retention window is read at the poll interval, each point the last value
of its step (`last_over_time`, so a GPU that stopped reporting shows a gap, not its last value
repeated for Prometheus' 5-minute lookback); a longer range is read in rollup buckets
(TELEMETRY_ROLLUP_BUCKET_S), each point the bucket's mean (`avg_over_time`) stamped with the
bucket's start, as the database's rollups are. Evaluation times are aligned to the step, so
samples taken on the poll's slots come back at their own timestamps.

An unreachable Prometheus, a timeout, an HTTP error or an answer that is not a matrix raises
PrometheusUnavailable with a reason fit to show a user (no URL credentials).
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import requests
from django.conf import settings
from django.utils import timezone

from nodes.collectors.prometheus import METRIC_FB_USED, METRIC_POWER, METRIC_TEMPERATURE, METRIC_UTILIZATION
from nodes.models import GPU, Node
from nodes.telemetry.samples import ROLLUP_FIELDS, plausible

# chart field -> (DCGM metric, how the series of one UUID combine)
FIELD_METRICS: dict[str, tuple[str, str]] = {
    "utilization_pct": (METRIC_UTILIZATION, "avg"),
    "memory_used_mib": (METRIC_FB_USED, "sum"),
    "power_w": (METRIC_POWER, "max"),
    "temperature_c": (METRIC_TEMPERATURE, "max"),
}
assert tuple(FIELD_METRICS) == ROLLUP_FIELDS  # the charts draw exactly these
# The label each series of the answer carries to say which chart field it is.
FIELD_LABEL = "gpuplane_field"
# Seconds a chart's query may take before the series API answers 503.
TIMEOUT_S = 10
# Prometheus refuses a query_range of more than 11,000 points per series.
MAX_POINTS = 11_000


class PrometheusUnavailable(Exception):
    """Prometheus could not answer the series query; the message says why, without credentials."""


def enabled() -> bool:
    """True when Prometheus is the time-series store (settings.GPUPLANE_PROMETHEUS_URL set)."""
    return bool(settings.GPUPLANE_PROMETHEUS_URL)


def uuid_selector(uuids: list[str]) -> str:
    """A label matcher for exactly these GPU UUIDs, escaped for RE2 and for a PromQL string."""
    if len(uuids) == 1:
        return 'UUID="' + _promql_string(uuids[0]) + '"'
    pattern = "|".join(re.escape(uuid) for uuid in sorted(uuids))
    return 'UUID=~"' + _promql_string(pattern) + '"'


def _promql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series_query(uuids: list[str], step_s: int, *, averaged: bool) -> str:
    """One PromQL expression answering every chart field of these GPUs, each series labelled
    FIELD_LABEL=<field> and grouped by UUID. One query: one round trip and one answer to check.

    Each point covers one step of samples, no sample in two points: raw, the last value of
    (T - step, T]; `averaged`, the mean of [T - step, T) (a bucket, its start included, its end
    not, as the database's rollup buckets). Prometheus 2's range selectors include both ends,
    hence the window 1 ms short of the step.
    """
    window = f"[{step_s * 1000 - 1}ms]" if not averaged else f"[{step_s * 1000 - 1}ms] offset 1ms"
    over_time = "avg_over_time" if averaged else "last_over_time"
    selector = uuid_selector(uuids)
    parts = []
    for field, (metric, combine) in FIELD_METRICS.items():
        raw = f"{over_time}({metric}{{{selector}}}{window})"
        # Device-wide metrics repeat on every MIG instance: max of (UUID) alone is right.
        per_instance = raw if combine == "max" else f"max by (UUID, GPU_I_ID) ({raw})"
        combined = f"{combine} by (UUID) ({per_instance})"
        parts.append(f'label_replace({combined}, "{FIELD_LABEL}", "{field}", "", "")')
    return " or ".join(parts)


def step_for(start: datetime, end: datetime, now: datetime) -> tuple[int, bool]:
    """(step in seconds, averaged): the poll interval inside the raw retention window, the rollup
    bucket beyond it (the database series' rule), never more than MAX_POINTS points."""
    averaged = start < now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H)
    step = settings.TELEMETRY_ROLLUP_BUCKET_S if averaged else settings.TELEMETRY_POLL_INTERVAL_S
    return max(step, math.ceil((end - start).total_seconds() / MAX_POINTS)), averaged


def gpu_series(gpu: GPU, start: datetime, end: datetime, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """Points of one GPU between `start` and `end`, oldest first: {"ts", *ROLLUP_FIELDS} (None: not reported)."""
    return _series([gpu.uuid], start, end, now or timezone.now()).get(gpu.uuid, [])


def node_series(
    node: Node, start: datetime, end: datetime, *, now: datetime | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Points of each GPU of `node`, keyed by GPU UUID (every GPU, [] without data); as `gpu_series`."""
    uuids = list(node.gpus.order_by("index").values_list("uuid", flat=True))
    if not uuids:
        return {}
    series = _series(uuids, start, end, now or timezone.now())
    return {uuid: series.get(uuid, []) for uuid in uuids}


def _series(uuids: list[str], start: datetime, end: datetime, now: datetime) -> dict[str, list[dict[str, Any]]]:
    step, averaged = step_for(start, end, now)
    first, last = math.ceil(start.timestamp() / step) * step, math.floor(end.timestamp() / step) * step
    if averaged:  # evaluated at each bucket's end, stamped with its start
        first, last = first + step, last + step
    matrix = query_range(series_query(uuids, step, averaged=averaged), first, last, step)
    return points_by_uuid(matrix, shift_s=step if averaged else 0)


def points_by_uuid(matrix: list[Any], *, shift_s: int = 0) -> dict[str, list[dict[str, Any]]]:
    """A query_range answer of `series_query` as chart points per UUID, oldest first.

    Values that are not a plausible figure (NaN, +Inf, out of METRIC_RANGES) read as None, as
    the database series do; `shift_s` moves every point back (a bucket's end to its start).
    """
    points: dict[str, dict[float, dict[str, Any]]] = defaultdict(dict)
    for item in matrix:
        labels = item.get("metric", {}) if isinstance(item, dict) else {}
        field, uuid, values = labels.get(FIELD_LABEL), labels.get("UUID"), item.get("values")
        if field not in FIELD_METRICS or not uuid or not isinstance(values, list):
            raise PrometheusUnavailable(f"Prometheus answered a series gpuplane did not ask for: {str(item)[:200]}")
        for pair in values:
            try:
                ts, value = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                raise PrometheusUnavailable(f"Prometheus answered a malformed sample: {pair!r}") from None
            point = points[uuid].get(ts)
            if point is None:
                point = points[uuid][ts] = {"ts": datetime.fromtimestamp(ts - shift_s, tz=UTC), **dict.fromkeys(ROLLUP_FIELDS)}
            point[field] = value if plausible(field, value) else None
    return {uuid: [by_ts[ts] for ts in sorted(by_ts)] for uuid, by_ts in points.items()}


def query_range(promql: str, start_s: float, end_s: float, step_s: int) -> list[Any]:
    """Run `promql` over [start_s, end_s] every `step_s`; the answer's matrix, or PrometheusUnavailable."""
    url = settings.GPUPLANE_PROMETHEUS_URL.rstrip("/")
    timeout = TIMEOUT_S
    params: dict[str, str | float] = {"query": promql, "start": start_s, "end": end_s, "step": step_s}
    try:
        response = requests.get(
            f"{url}/api/v1/query_range",
            params=params,
            headers={"Accept": "application/json"},
            timeout=timeout,
        )
    except requests.Timeout:
        raise PrometheusUnavailable(f"Prometheus did not answer within {timeout} s.") from None
    except requests.ConnectionError:
        raise PrometheusUnavailable("Prometheus is unreachable (connection failed).") from None
    except requests.RequestException as exc:
        raise PrometheusUnavailable(f"The request to Prometheus failed ({type(exc).__name__}).") from None
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("status") != "success":
        detail = f"{payload.get('errorType', 'error')}: {payload.get('error', '')}" if isinstance(payload, dict) else ""
        raise PrometheusUnavailable(f"Prometheus answered HTTP {response.status_code}{': ' + detail if detail else ''}.")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise PrometheusUnavailable("Prometheus did not answer a range of series (a matrix).")
    return data["result"]
