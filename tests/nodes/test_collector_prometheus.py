"""DCGMPrometheusCollector against a local HTTP server answering Prometheus API JSON.

The answers copy the shape of a real Prometheus instant query over DCGM exporter series: every
series carries the exporter's labels (UUID, gpu, Hostname, modelName, device, ...) and a value
`[<unix time float>, "<number as string>"]`.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from nodes.collectors.base import CollectorUnavailable
from nodes.collectors.prometheus import DCGMPrometheusCollector

EVAL_TS = 1740830430.781  # 2025-03-01T12:00:30.781Z


def series(name: str, gpu_uuid: str, gpu: int, host: str, value: str, **extra: str) -> dict[str, Any]:
    labels = {
        "__name__": name,
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "Hostname": host,
        "UUID": gpu_uuid,
        "container": "",
        "device": f"nvidia{gpu}",
        "gpu": str(gpu),
        "instance": "10.0.0.5:9400",
        "job": "nvidia-dcgm-exporter",
        "modelName": "NVIDIA H100 80GB HBM3",
        "namespace": "gpu-operator",
        "pci_bus_id": f"00000000:{gpu + 0x18:02X}:00.0",
        "pod": "",
        **extra,
    }
    return {"metric": labels, "value": [EVAL_TS, value]}


def vector(*items: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(items)}}


class FakePrometheus:
    """Answers GET /api/v1/query with `self.answer` (status, body); records the queries asked."""

    def __init__(self) -> None:
        self.answer: tuple[int, bytes] = (200, json.dumps(vector()).encode())
        self.queries: list[str] = []
        self.delay_s = 0.0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                parsed = urlparse(self.path)
                if parsed.path != "/api/v1/query":
                    self.send_error(404)
                    return
                fake.queries.extend(parse_qs(parsed.query).get("query", []))
                time.sleep(fake.delay_s)
                status, body = fake.answer
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except BrokenPipeError:
                    pass  # the client gave up first (the timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def answer_json(self, payload: Any, status: int = 200) -> None:
        self.answer = (status, json.dumps(payload).encode())


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def full_gpu(gpu_uuid: str, gpu: int, host: str, util: str, used: str, free: str, power: str, temp: str, clock: str):
    return [
        series("DCGM_FI_DEV_GPU_UTIL", gpu_uuid, gpu, host, util),
        series("DCGM_FI_DEV_FB_USED", gpu_uuid, gpu, host, used),
        series("DCGM_FI_DEV_FB_FREE", gpu_uuid, gpu, host, free),
        series("DCGM_FI_DEV_POWER_USAGE", gpu_uuid, gpu, host, power),
        series("DCGM_FI_DEV_GPU_TEMP", gpu_uuid, gpu, host, temp),
        series("DCGM_FI_DEV_SM_CLOCK", gpu_uuid, gpu, host, clock),
    ]


def test_it_asks_one_instant_query_and_maps_each_gpu_field_by_field(prometheus):
    prometheus.answer_json(vector(
        *full_gpu("GPU-bbb", 1, "gpu-node-2", "88", "70000", "11559", "655.25", "71", "1980"),
        *full_gpu("GPU-aaa", 0, "gpu-node-1", "37", "20480", "61079", "312.5", "54", "1755"),
    ))

    readings = DCGMPrometheusCollector(prometheus.url + "/").collect()

    assert prometheus.queries == [
        '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|'
        'DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_SM_CLOCK"}'
    ]
    assert [r.gpu_uuid for r in readings] == ["GPU-aaa", "GPU-bbb"]  # by host, then index
    first = readings[0]
    assert first.index == 0
    assert first.ts == datetime(2025, 3, 1, 12, 0, 30, tzinfo=UTC)
    assert first.utilization_pct == 37.0
    assert first.memory_used_mib == 20480
    assert first.memory_total_mib == 81559  # used + free, MiB as DCGM reports them
    assert first.power_w == 312.5
    assert first.temperature_c == 54.0
    assert first.sm_clock_mhz == 1755
    assert first.power_limit_w is None and first.mig_enabled is None
    assert first.missing == frozenset({"power_limit_w", "mig_enabled", "memory_reserved_mib", "processes"})
    assert (readings[1].utilization_pct, readings[1].memory_total_mib, readings[1].power_w) == (88.0, 81559, 655.25)


def test_a_metric_without_a_series_or_with_nan_is_missing(prometheus):
    prometheus.answer_json(vector(
        series("DCGM_FI_DEV_GPU_UTIL", "GPU-ccc", 0, "gpu-node-3", "12"),
        series("DCGM_FI_DEV_FB_USED", "GPU-ccc", 0, "gpu-node-3", "1024"),
        # no FB_FREE: the total cannot be known; no POWER_USAGE at all
        series("DCGM_FI_DEV_GPU_TEMP", "GPU-ccc", 0, "gpu-node-3", "NaN"),
        # a series without a UUID label cannot be matched to a GPU and is ignored
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "9"}, "value": [EVAL_TS, "50"]},
    ))

    [reading] = DCGMPrometheusCollector(prometheus.url).collect()

    assert reading.gpu_uuid == "GPU-ccc"
    assert reading.utilization_pct == 12.0 and reading.memory_used_mib == 1024
    assert reading.memory_total_mib is None and reading.power_w is None and reading.temperature_c is None
    assert reading.missing == frozenset(
        {"memory_total_mib", "power_w", "power_limit_w", "temperature_c", "sm_clock_mhz", "mig_enabled",
         "memory_reserved_mib", "processes"}
    )
    assert reading.has_metrics


def test_a_mig_gpu_combines_its_per_instance_series(prometheus):
    mig = {"GPU_I_PROFILE": "3g.40gb"}
    prometheus.answer_json(vector(
        series("DCGM_FI_DEV_FB_USED", "GPU-mig", 2, "gpu-node-1", "30000", GPU_I_ID="1", **mig),
        series("DCGM_FI_DEV_FB_FREE", "GPU-mig", 2, "gpu-node-1", "10779", GPU_I_ID="1", **mig),
        series("DCGM_FI_DEV_FB_USED", "GPU-mig", 2, "gpu-node-1", "5000", GPU_I_ID="2", **mig),
        series("DCGM_FI_DEV_FB_FREE", "GPU-mig", 2, "gpu-node-1", "35779", GPU_I_ID="2", **mig),
        series("DCGM_FI_DEV_POWER_USAGE", "GPU-mig", 2, "gpu-node-1", "410", GPU_I_ID="1", **mig),
        series("DCGM_FI_DEV_POWER_USAGE", "GPU-mig", 2, "gpu-node-1", "410", GPU_I_ID="2", **mig),
        series("DCGM_FI_DEV_GPU_TEMP", "GPU-mig", 2, "gpu-node-1", "61", GPU_I_ID="1", **mig),
    ))

    [reading] = DCGMPrometheusCollector(prometheus.url).collect()

    assert reading.mig_enabled is True
    assert reading.memory_used_mib == 35000  # 30000 + 5000
    assert reading.memory_total_mib == 81558  # (30000 + 10779) + (5000 + 35779)
    assert reading.power_w == 410.0  # device-wide: not summed over instances
    assert reading.temperature_c == 61.0
    assert reading.utilization_pct is None and "utilization_pct" in reading.missing


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
         "HTTP 400: bad_data: parse error at char 3"),
        (503, {"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}, "HTTP 503"),
        (200, {"status": "error", "errorType": "timeout", "error": "query timed out"}, "timeout: query timed out"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "did not answer an instant vector"),
        (200, {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}, "malformed"),
    ],
)
def test_an_error_answer_raises_collector_unavailable(prometheus, status, body, expected):
    prometheus.answer_json(body, status=status)

    with pytest.raises(CollectorUnavailable) as raised:
        DCGMPrometheusCollector(prometheus.url).collect()

    assert expected in str(raised.value)
    assert prometheus.url in str(raised.value)


def test_an_answer_that_is_not_json_raises_collector_unavailable(prometheus):
    prometheus.answer = (200, b"<html>502 Bad Gateway</html>")

    with pytest.raises(CollectorUnavailable, match="not JSON"):
        DCGMPrometheusCollector(prometheus.url).collect()


def test_an_unreachable_prometheus_raises_collector_unavailable(prometheus):
    url = prometheus.url
    prometheus.server.shutdown()
    prometheus.server.server_close()  # nothing listens on the port any more

    with pytest.raises(CollectorUnavailable, match="unreachable"):
        DCGMPrometheusCollector(url, timeout_s=2).collect()


def test_a_prometheus_slower_than_the_timeout_raises_collector_unavailable(prometheus):
    prometheus.delay_s = 1.0

    started = time.monotonic()
    with pytest.raises(CollectorUnavailable, match="unreachable"):
        DCGMPrometheusCollector(prometheus.url, timeout_s=0.2).collect()
    assert time.monotonic() - started < 1.0
