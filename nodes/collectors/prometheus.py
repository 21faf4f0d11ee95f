"""DCGMPrometheusCollector: GPU metrics of the whole cluster from NVIDIA's DCGM exporter, via Prometheus.

The DCGM exporter (a DaemonSet of the GPU operator) exposes per-GPU series that Prometheus
scrapes; each carries the labels `UUID`, `gpu` (index on its node), `Hostname`, `modelName`,
and on MIG-enabled GPUs `GPU_I_ID` / `GPU_I_PROFILE` (one series per GPU instance). This
collector asks Prometheus's HTTP API for the latest value of every metric below in ONE instant
query (`/api/v1/query`, `{__name__=~"A|B|..."}`), so 10,000 GPUs cost one round trip, and
groups the series by `UUID`:

| reading field     | DCGM field                          | unit as DCGM reports it |
|-------------------|-------------------------------------|-------------------------|
| utilization_pct   | DCGM_FI_DEV_GPU_UTIL                | %                       |
| memory_used_mib   | DCGM_FI_DEV_FB_USED                 | MiB                     |
| memory_total_mib  | DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE | MiB               |
| power_w           | DCGM_FI_DEV_POWER_USAGE             | W                       |
| temperature_c     | DCGM_FI_DEV_GPU_TEMP                | degrees C               |
| sm_clock_mhz      | DCGM_FI_DEV_SM_CLOCK (in the exporter's default set) | MHz    |

A metric with no series for a GPU (not exported, NaN) is marked missing. On a MIG GPU the
per-instance series are combined: framebuffer used/free summed, utilization averaged (DCGM does
not support GPU_UTIL there, so usually missing), power, temperature and clock are device-wide
and their maximum is taken. The power limit is not queried (missing). An unreachable Prometheus,
an HTTP error or an answer that is not a Prometheus vector raises CollectorUnavailable.
"""
from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodes.collectors.base import CollectorUnavailable, GPUReading, ReadingMetrics

METRIC_UTILIZATION = "DCGM_FI_DEV_GPU_UTIL"
METRIC_FB_USED = "DCGM_FI_DEV_FB_USED"
METRIC_FB_FREE = "DCGM_FI_DEV_FB_FREE"
METRIC_POWER = "DCGM_FI_DEV_POWER_USAGE"
METRIC_TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"
METRIC_SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
METRICS: tuple[str, ...] = (
    METRIC_UTILIZATION, METRIC_FB_USED, METRIC_FB_FREE, METRIC_POWER, METRIC_TEMPERATURE, METRIC_SM_CLOCK,
)
DEFAULT_TIMEOUT_S = 10.0


@dataclass
class _GPUSeries:
    """The values of one GPU's series, per metric (several per metric on a MIG GPU)."""

    index: int = -1
    hostname: str = ""
    mig: bool = False
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    ts: float = 0.0


class DCGMPrometheusCollector:
    """Reads DCGM exporter metrics for every GPU from the Prometheus at `url` (e.g. http://prometheus:9090).

    `timeout_s` bounds the HTTP request. See the module docstring for the mapping.
    """

    name = "dcgm"

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query_string(self) -> str:
        """The PromQL instant query sent: every DCGM metric above, in one selector."""
        return '{__name__=~"' + "|".join(METRICS) + '"}'

    def collect(self) -> list[GPUReading]:
        """One reading per GPU UUID found in Prometheus, ordered by (hostname, index)."""
        result = self._query(self.query_string())
        gpus: dict[str, _GPUSeries] = {}
        for item in result:
            metric = item.get("metric") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
                raise CollectorUnavailable(f"Prometheus at {self.url} answered a malformed vector sample: {item!r}")
            gpu_uuid = metric.get("UUID")
            name = metric.get("__name__")
            if not gpu_uuid or name not in METRICS:
                continue  # a series without a GPU UUID cannot be matched to a GPU row
            series = gpus.setdefault(gpu_uuid, _GPUSeries())
            series.index = _int_label(metric.get("gpu"), series.index)
            series.hostname = metric.get("Hostname", series.hostname)
            series.mig = series.mig or bool(metric.get("GPU_I_ID"))
            try:
                ts, number = float(value[0]), float(value[1])
            except (TypeError, ValueError):
                raise CollectorUnavailable(f"Prometheus at {self.url} answered a non-numeric value: {value!r}") from None
            series.ts = max(series.ts, ts)
            if math.isfinite(number):
                series.values[name].append(number)
        readings = [self._reading(gpu_uuid, series) for gpu_uuid, series in gpus.items()]
        return sorted(readings, key=lambda r: (gpus[r.gpu_uuid].hostname, r.index, r.gpu_uuid))

    def _reading(self, gpu_uuid: str, series: _GPUSeries) -> GPUReading:
        values = series.values
        used = _total(values.get(METRIC_FB_USED))
        free = _total(values.get(METRIC_FB_FREE))
        utilization = _mean(values.get(METRIC_UTILIZATION))
        power = _max(values.get(METRIC_POWER))
        temperature = _max(values.get(METRIC_TEMPERATURE))
        sm_clock = _max(values.get(METRIC_SM_CLOCK))
        fields: ReadingMetrics = {
            "utilization_pct": None if utilization is None else min(100.0, max(0.0, utilization)),
            "memory_used_mib": None if used is None else int(used),
            "memory_total_mib": None if used is None or free is None else int(used + free),
            "memory_reserved_mib": None,  # DCGM_FI_DEV_FB_RESERVED is recent: not queried
            "power_w": power,
            "power_limit_w": None,
            "temperature_c": temperature,
            "sm_clock_mhz": None if sm_clock is None else int(sm_clock),
            # Only a MIG GPU is recognisable (GPU_I_ID); absence of the label proves nothing.
            "mig_enabled": True if series.mig else None,
        }
        # Instant queries are evaluated at one moment; whole seconds keep (gpu, ts) stable.
        ts = datetime.fromtimestamp(int(series.ts), tz=UTC)
        return GPUReading(
            gpu_uuid=gpu_uuid,
            index=series.index,
            ts=ts,
            # Not queried: processes (nor reserved memory, None above).
            missing=frozenset(name for name, value in fields.items() if value is None) | {"processes"},
            **fields,
        )

    def _query(self, promql: str) -> list[Any]:
        """Run an instant query; return its result vector or raise CollectorUnavailable."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            # Prometheus answers 400/422/503 with a JSON error body worth showing.
            detail = _error_detail(exc.read())
            raise CollectorUnavailable(f"Prometheus at {self.url} answered HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CollectorUnavailable(f"Prometheus at {self.url} is unreachable: {reason}") from exc
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CollectorUnavailable(f"Prometheus at {self.url} answered something that is not JSON: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("status") != "success":
            raise CollectorUnavailable(f"Prometheus at {self.url} reported an error: {_error_detail(body)}")
        data = payload.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise CollectorUnavailable(f"Prometheus at {self.url} did not answer an instant vector: {str(data)[:200]}")
        return data["result"]


def _int_label(raw: Any, default: int) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return default


def _total(values: list[float] | None) -> float | None:
    return sum(values) if values else None


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def _max(values: list[float] | None) -> float | None:
    return max(values) if values else None


def _error_detail(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body[:200].decode(errors="replace")
    if isinstance(payload, dict) and payload.get("error"):
        return f"{payload.get('errorType', 'error')}: {payload['error']}"
    return str(payload)[:200]
