"""Prometheus as the telemetry time-series store (settings.GPUPLANE_PROMETHEUS_URL).

- Against a real Prometheus started by the suite (bench/prometheus_server.py), scraping
  gpuplane's /metrics/dcgm on the live server every second: polls of known, changing values come
  back from the node and GPU series APIs with exactly those values at their timestamps.
- With a fake HTTP answer: the PromQL sent, the step and alignment, the DCGM mapping, and a
  Prometheus that cannot answer (503 with the reason, never a 500).
- The poll keeps only the latest values in the database; /metrics/dcgm's format and access.
"""
from __future__ import annotations

import math
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from django.utils import timezone

from bench.prometheus_server import PROMETHEUS, instant, running_prometheus, scrape_config
from nodes.collectors.base import GPUReading
from nodes.models import GPU, GPUSample
from nodes.telemetry import prometheus
from nodes.telemetry.poll import store_poll
from tests.nodes.factories import make_node
from tests.nodes.prometheus_server import require_prometheus

STEP_S = 2  # the poll interval in these tests: Prometheus' step for raw ranges
POLLS = 5
NODE = "prom1.example.com"


def reading(
    uuid: str, index: int, ts: datetime, utilization_pct: float, memory_used_mib: int, power_w: float, temperature_c: float
) -> GPUReading:
    return GPUReading(
        gpu_uuid=uuid, index=index, ts=ts, utilization_pct=utilization_pct, memory_used_mib=memory_used_mib,
        memory_total_mib=81920, power_w=power_w, power_limit_w=700.0, temperature_c=temperature_c, sm_clock_mhz=None,
        mig_enabled=False,
        missing=frozenset({"sm_clock_mhz"}),
    )


def sent_values(poll: int, index: int) -> dict[str, Any]:
    """Values that change every poll and differ between GPUs (one decimal: what the API shows)."""
    return {
        "utilization_pct": round(10.5 + 7 * poll + 30 * index, 1),
        "memory_used_mib": 1000 * (poll + 1) + 100 * index + 23,
        "power_w": round(120.5 + 11 * poll + 50 * index, 1),
        "temperature_c": round(40.5 + poll + 3 * index, 1),
    }


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --- against a real Prometheus -------------------------------------------------------------------


@pytest.fixture
def real_prometheus(live_server, tmp_path: Path) -> Any:
    require_prometheus(PROMETHEUS, os.environ)
    config = scrape_config(urlsplit(live_server.url).netloc, "/metrics/dcgm", interval_s=1)
    with running_prometheus(tmp_path / "prometheus", config) as url:
        yield url


def wait_for_sample(url: str, ts: datetime, timeout_s: float = 20.0) -> None:
    """Until Prometheus holds the poll stamped `ts` for every GPU of NODE (one scrape carries them all)."""
    promql = f'min(timestamp(DCGM_FI_DEV_GPU_UTIL{{Hostname="{NODE}"}}))'
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = instant(url, promql)
        if result and float(result[0]["value"][1]) == ts.timestamp():
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape the poll of {ts} within {timeout_s} s: {instant(url, promql)}")


@pytest.mark.django_db(transaction=True)
def test_node_and_gpu_series_come_from_prometheus_and_match_what_was_sent(real_prometheus, settings, viewer_api):
    settings.GPUPLANE_PROMETHEUS_URL = real_prometheus
    settings.TELEMETRY_POLL_INTERVAL_S = STEP_S
    node = make_node(NODE, gpu_count=2)
    gpus = list(node.gpus.order_by("index"))
    # Past poll slots, aligned to the step like the poll's: each point lands on its own timestamp.
    last = math.floor(timezone.now().timestamp() / STEP_S) * STEP_S - STEP_S
    slots = [datetime.fromtimestamp(last - STEP_S * (POLLS - 1 - poll), tz=UTC) for poll in range(POLLS)]
    for poll, ts in enumerate(slots):
        report = store_poll(
            [reading(gpu.uuid, gpu.index, ts, **sent_values(poll, gpu.index)) for gpu in gpus],
            source="simulated", shard_nodes=250,
        )
        assert (report.stored, report.lost) == (2, 0)
        # /metrics/dcgm shows only the latest values: each poll must be scraped before the next.
        wait_for_sample(real_prometheus, ts)

    # The database kept the latest values only, not the history.
    assert GPUSample.objects.count() == 0
    assert GPU.objects.get(pk=gpus[1].pk).utilization_pct == sent_values(POLLS - 1, 1)["utilization_pct"]

    expected = {
        gpu.uuid: [{"ts": iso(ts), **sent_values(poll, gpu.index)} for poll, ts in enumerate(slots)] for gpu in gpus
    }
    answer = viewer_api.get(f"/api/v1/nodes/{NODE}/series/?range=1h")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["resolution"] == "raw"
    assert {uuid: gpu["points"] for uuid, gpu in body["gpus"].items()} == expected
    assert [gpu["index"] for gpu in body["gpus"].values()] == [0, 1]

    answer = viewer_api.get(f"/api/v1/gpus/{gpus[1].uuid}/series/?range=6h")
    assert answer.status_code == 200, answer.content
    assert answer.json()["points"] == expected[gpus[1].uuid]

    # A week is read in 5-minute means, stamped with the bucket's start, as the rollups are.
    week = viewer_api.get(f"/api/v1/gpus/{gpus[0].uuid}/series/?range=7d").json()
    assert week["resolution"] == "5m"
    bucket_values: dict[str, list[float]] = {}
    for poll, ts in enumerate(slots):
        start = datetime.fromtimestamp(ts.timestamp() // 300 * 300, tz=UTC)
        bucket_values.setdefault(iso(start), []).append(sent_values(poll, 0)["utilization_pct"])
    assert {p["ts"]: p["utilization_pct"] for p in week["points"]} == {
        ts: round(sum(values) / len(values), 1) for ts, values in bucket_values.items()
    }


@pytest.mark.django_db
def test_a_missing_prometheus_skips_outside_ci_and_fails_in_ci(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="prometheus"):
        require_prometheus(tmp_path / "none", {})
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_prometheus(tmp_path / "none", {"CI": "true"})


# --- with a fake HTTP answer ------------------------------------------------------------------


class FakeResponse:
    def __init__(self, status_code: int, payload: Any) -> None:
        self.status_code = status_code
        self.payload = payload

    def json(self) -> Any:
        if isinstance(self.payload, Exception):
            raise self.payload
        return self.payload


class FakePrometheus:
    """Stands in for requests.get: records each request, answers `answer` (raises it if an exception)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer: Any = FakeResponse(200, {"status": "success", "data": {"resultType": "matrix", "result": []}})

    def get(self, url: str, *, params: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
        self.calls.append({"url": url, "params": params, "timeout": timeout})
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def fake_prometheus(monkeypatch, settings) -> FakePrometheus:
    settings.GPUPLANE_PROMETHEUS_URL = "http://prometheus.test:9090/"
    settings.TELEMETRY_POLL_INTERVAL_S = 30
    fake = FakePrometheus()
    monkeypatch.setattr(prometheus.requests, "get", fake.get)
    return fake


def matrix(*series: tuple[str, str, list[tuple[float, str]]]) -> FakeResponse:
    return FakeResponse(200, {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"UUID": uuid, prometheus.FIELD_LABEL: field}, "values": [[ts, value] for ts, value in values]}
        for uuid, field, values in series
    ]}})


def test_the_query_reads_dcgm_metrics_combined_per_uuid():
    query = prometheus.series_query(["GPU-a", "GPU-b"], 30, averaged=False)
    assert 'avg by (UUID) (max by (UUID, GPU_I_ID) (last_over_time(DCGM_FI_DEV_GPU_UTIL{UUID=~"GPU\\\\-a|GPU\\\\-b"}[29999ms])))' in query
    assert 'sum by (UUID) (max by (UUID, GPU_I_ID) (last_over_time(DCGM_FI_DEV_FB_USED{' in query
    assert "max by (UUID) (last_over_time(DCGM_FI_DEV_POWER_USAGE{" in query
    assert "max by (UUID) (last_over_time(DCGM_FI_DEV_GPU_TEMP{" in query
    assert query.count("label_replace(") == 4 and query.count(" or ") == 3
    averaged = prometheus.series_query(["GPU-a"], 300, averaged=True)
    assert 'avg_over_time(DCGM_FI_DEV_GPU_UTIL{UUID="GPU-a"}[299999ms] offset 1ms)' in averaged


def test_a_uuid_cannot_break_out_of_its_label_matcher():
    selector = prometheus.uuid_selector(['GPU-"x"} or vector(1) #', "GPU-y"])
    # The quote is escaped for PromQL (\") and for the regex (\\"): the matcher stays one string.
    assert selector.startswith('UUID=~"') and selector.endswith('"')
    assert '\\"' in selector and 'vector\\\\(1\\\\)' in selector


@pytest.mark.django_db
def test_node_series_asks_prometheus_once_at_the_poll_interval_aligned_to_the_step(fake_prometheus, viewer_api):
    make_node("n1", gpu_count=2)
    fake_prometheus.answer = matrix(
        ("GPU-n1-0", "utilization_pct", [(1800000000, "12.5"), (1800000030, "NaN")]),
        ("GPU-n1-0", "memory_used_mib", [(1800000030, "2048")]),
        ("GPU-n1-0", "power_w", [(1800000000, "+Inf")]),
    )
    body = viewer_api.get("/api/v1/nodes/n1/series/?range=1h").json()
    [call] = fake_prometheus.calls  # one request for the whole node
    assert call["url"] == "http://prometheus.test:9090/api/v1/query_range"
    assert call["params"]["step"] == 30
    assert call["params"]["start"] % 30 == 0 and call["params"]["end"] % 30 == 0
    assert 3570 <= call["params"]["end"] - call["params"]["start"] <= 3600
    assert 'UUID=~"GPU\\\\-n1\\\\-0|GPU\\\\-n1\\\\-1"' in call["params"]["query"]
    assert body["resolution"] == "raw"
    # NaN and +Inf are not figures: null, as the database series show implausible values.
    assert body["gpus"]["GPU-n1-0"]["points"] == [
        {"ts": "2027-01-15T08:00:00Z", "utilization_pct": 12.5, "memory_used_mib": None, "power_w": None, "temperature_c": None},
        {"ts": "2027-01-15T08:00:30Z", "utilization_pct": None, "memory_used_mib": 2048, "power_w": None, "temperature_c": None},
    ]
    assert body["gpus"]["GPU-n1-1"]["points"] == []


@pytest.mark.django_db
def test_long_ranges_are_bucket_means_stamped_with_the_bucket_start(fake_prometheus, viewer_api):
    make_node("n1", gpu_count=1)
    fake_prometheus.answer = matrix(("GPU-n1-0", "utilization_pct", [(1800000300, "40")]))
    body = viewer_api.get("/api/v1/gpus/GPU-n1-0/series/?range=30d").json()
    params = fake_prometheus.calls[0]["params"]
    assert params["step"] == 300 and "avg_over_time" in params["query"]
    assert body["resolution"] == "5m"
    assert body["points"] == [
        {"ts": "2027-01-15T08:00:00Z", "utilization_pct": 40.0, "memory_used_mib": None, "power_w": None, "temperature_c": None}
    ]


def test_the_step_keeps_a_range_under_prometheus_point_limit(settings):
    settings.TELEMETRY_POLL_INTERVAL_S = 1
    now = datetime(2027, 1, 1, tzinfo=UTC)
    assert prometheus.step_for(now - timedelta(hours=1), now, now) == (1, False)
    assert prometheus.step_for(now - timedelta(hours=24), now, now) == (8, False)  # 86,400 s / 11,000
    assert prometheus.step_for(now - timedelta(days=7), now, now) == (300, True)


@pytest.mark.django_db
@pytest.mark.parametrize(("answer", "reason"), [
    (requests.ConnectionError("refused"), "Prometheus is unreachable (connection failed)."),
    (requests.ReadTimeout("slow"), "Prometheus did not answer within 10 s."),
    (FakeResponse(400, {"status": "error", "errorType": "bad_data", "error": "parse error"}),
     "Prometheus answered HTTP 400: bad_data: parse error."),
    (FakeResponse(502, ValueError("not JSON")), "Prometheus answered HTTP 502."),
    (FakeResponse(200, {"status": "success", "data": {"resultType": "vector", "result": []}}),
     "Prometheus did not answer a range of series (a matrix)."),
])
def test_a_prometheus_that_cannot_answer_is_a_503_naming_the_reason(fake_prometheus, viewer_api, settings, answer, reason):
    settings.GPUPLANE_PROMETHEUS_URL = "http://scraper:s3cret@prometheus.test:9090"
    make_node("n1", gpu_count=1)
    fake_prometheus.answer = answer
    for url in ("/api/v1/nodes/n1/series/", "/api/v1/gpus/GPU-n1-0/series/"):
        response = viewer_api.get(url)
        assert response.status_code == 503
        assert response.json() == {"detail": f"Telemetry store unavailable: {reason}"}
        assert "s3cret" not in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_prometheus_that_is_down_gives_503_and_the_node_page_still_renders(settings, viewer_api, client, viewer):
    from bench.prometheus_server import free_port

    settings.GPUPLANE_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    make_node("n1", gpu_count=1)
    response = viewer_api.get("/api/v1/nodes/n1/series/")
    assert response.status_code == 503
    assert response.json()["detail"] == "Telemetry store unavailable: Prometheus is unreachable (connection failed)."
    client.force_login(viewer)
    page = client.get("/nodes/n1/")
    assert page.status_code == 200
    assert b"data-empty-error" in page.content  # where the chart script shows the reason


# --- the database side and /metrics/dcgm --------------------------------------------------------


@pytest.mark.django_db
def test_with_prometheus_the_poll_keeps_only_the_latest_values(settings):
    settings.GPUPLANE_PROMETHEUS_URL = "http://prometheus.test:9090"
    node = make_node("n1", gpu_count=2)
    ts = timezone.now().replace(microsecond=0) - timedelta(seconds=30)
    polls = [
        [reading(gpu.uuid, gpu.index, ts + timedelta(seconds=step), 10.0 + step, 500, 150.0, 40.0) for gpu in node.gpus.all()]
        for step in (0, 30)
    ]
    assert store_poll(polls[0], source="simulated", shard_nodes=1).stored == 2
    assert store_poll(polls[1], source="simulated", shard_nodes=1).stored == 2
    again = store_poll(polls[1], source="simulated", shard_nodes=1)
    assert (again.stored, again.duplicates) == (0, 2)  # a repeated poll changes nothing
    assert GPUSample.objects.count() == 0
    assert {(g.utilization_pct, g.sampled_at) for g in GPU.objects.all()} == {(40.0, ts + timedelta(seconds=30))}


@pytest.mark.django_db
def test_without_prometheus_the_poll_still_stores_every_sample(settings):
    node = make_node("n1", gpu_count=2)
    ts = timezone.now().replace(microsecond=0) - timedelta(seconds=30)
    for step in (0, 30):
        readings = [reading(g.uuid, g.index, ts + timedelta(seconds=step), 10.0, 500, 150.0, 40.0) for g in node.gpus.all()]
        store_poll(readings, source="simulated", shard_nodes=1)
    assert GPUSample.objects.count() == 4


@pytest.mark.django_db
def test_metrics_dcgm_exposes_the_latest_readings_in_dcgm_format(api, settings):
    node = make_node("n1", gpu_count=2, gpu_memory_mib=81920)
    make_node("silent", gpu_count=1)
    sampled = datetime(2027, 1, 15, 8, 0, 0, tzinfo=UTC)
    GPU.objects.filter(node=node, index=0).update(
        utilization_pct=42.5, memory_used_mib=1000, power_w=250.0, temperature_c=61.0, sampled_at=sampled
    )
    GPU.objects.filter(node=node, index=1).update(utilization_pct=7.0, sampled_at=sampled)
    response = api.get("/metrics/dcgm")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    labels = '{gpu="0",UUID="GPU-n1-0",device="nvidia0",modelName="H100-SXM5-80GB",Hostname="n1"}'
    stamp = 1800000000000  # sampled_at in ms: Prometheus stores the value at the time it was taken
    for line in (
        f"DCGM_FI_DEV_GPU_UTIL{labels} 42.5 {stamp}",
        f"DCGM_FI_DEV_FB_USED{labels} 1000 {stamp}",
        f"DCGM_FI_DEV_FB_FREE{labels} 80920 {stamp}",
        f"DCGM_FI_DEV_POWER_USAGE{labels} 250.0 {stamp}",
        f"DCGM_FI_DEV_GPU_TEMP{labels} 61.0 {stamp}",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ):
        assert line in text.splitlines()
    # GPU 1 reported utilization only; the silent node's GPU reported nothing.
    assert [line.split("{")[0] for line in text.splitlines() if 'UUID="GPU-n1-1"' in line] == ["DCGM_FI_DEV_GPU_UTIL"]
    assert "silent" not in text

    settings.GPUPLANE_METRICS_TOKEN = "scrape-me"
    assert api.get("/metrics/dcgm").status_code == 401
    assert api.get("/metrics/dcgm", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200

    settings.GPUPLANE_TELEMETRY_SOURCE = "dcgm"  # the values came from Prometheus: not exported again
    assert "DCGM_FI_DEV" not in api.get("/metrics/dcgm", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()


def test_the_dcgm_source_needs_a_prometheus_url(settings):
    from nodes.collectors.backends import get_collector

    settings.GPUPLANE_TELEMETRY_SOURCE = "dcgm"
    settings.GPUPLANE_PROMETHEUS_URL = ""
    with pytest.raises(ValueError, match="set GPUPLANE_PROMETHEUS_URL"):
        get_collector()


@pytest.mark.django_db
def test_with_prometheus_an_agent_batch_keeps_each_gpus_newest_sample(settings):
    from nodes.telemetry.ingest import ingest_samples
    from nodes.telemetry.samples import SampleIn

    settings.GPUPLANE_PROMETHEUS_URL = "http://prometheus.test:9090"
    node = make_node("n1", gpu_count=1)
    ts = timezone.now().replace(microsecond=0) - timedelta(minutes=2)
    batch = [SampleIn(gpu_uuid="GPU-n1-0", ts=ts + timedelta(seconds=30 * k), utilization_pct=10.0 * k) for k in range(3)]
    result = ingest_samples(batch, node=node)
    assert (result.stored, result.duplicates) == (1, 2)
    assert GPUSample.objects.count() == 0
    gpu = GPU.objects.get(uuid="GPU-n1-0")
    assert (gpu.utilization_pct, gpu.sampled_at) == (20.0, ts + timedelta(seconds=60))
