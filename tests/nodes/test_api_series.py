"""`/api/v1/gpus/{uuid}/series/`, `/api/v1/nodes/{name}/series/` and `/api/v1/heatmap/`.

Raw samples answer ranges inside the raw retention window (24 h by default); longer ranges are
answered from 5-minute rollups (the recent, not yet rolled-up part bucketed on the fly).
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone
from drf_spectacular.drainage import reset_generator_stats

from nodes.api.series import bucket_label
from nodes.models import GPU, GPUSample, GPUSampleRollup
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def sample(gpu: GPU, ts: datetime, util: float, memory_mib: int = 1000, power_w: float = 100.0, temp_c: float = 40.0) -> GPUSample:
    return GPUSample.objects.create(
        gpu=gpu, ts=ts, utilization_pct=util, memory_used_mib=memory_mib, memory_total_mib=gpu.memory_mib,
        power_w=power_w, temperature_c=temp_c, source="simulated",
    )


def rollup(gpu: GPU, bucket_start: datetime, util_avg: float, samples: int = 10) -> GPUSampleRollup:
    return GPUSampleRollup.objects.create(
        gpu=gpu, bucket_start=bucket_start, bucket_s=300, samples=samples,
        utilization_pct_avg=util_avg, utilization_pct_max=util_avg + 5,
        memory_used_mib_avg=2048.4, memory_used_mib_max=4096, power_w_avg=250.26, power_w_max=300.0,
        temperature_c_avg=60.04, temperature_c_max=65.0,
    )


@pytest.fixture
def now() -> datetime:
    # Whole seconds, so that expected ISO strings are exact.
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def history(now) -> dict[str, GPU]:
    """GPU 0 of node `a2.example.com`: raw at -2 h, -30 min, -10 s; rollups at -3 d and -20 d. GPU 1: nothing."""
    make_node("a2.example.com", gpu_count=2)
    gpu0 = GPU.objects.get(uuid="GPU-a2.example.com-0")
    sample(gpu0, now - timedelta(hours=2), 20.0)
    sample(gpu0, now - timedelta(minutes=30), 40.25, memory_mib=2000, power_w=150.55, temp_c=50.0)
    sample(gpu0, now - timedelta(seconds=10), 60.0, memory_mib=3000)
    rollup(gpu0, datetime.fromtimestamp((now - timedelta(days=3)).timestamp() // 300 * 300, tz=UTC), 33.3)
    rollup(gpu0, datetime.fromtimestamp((now - timedelta(days=20)).timestamp() // 300 * 300, tz=UTC), 77.7)
    return {"gpu0": gpu0, "gpu1": GPU.objects.get(uuid="GPU-a2.example.com-1")}


def test_it_serves_raw_samples_of_the_last_hour_by_default(viewer_api, history, now):
    response = viewer_api.get("/api/v1/gpus/GPU-a2.example.com-0/series/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["gpu"], body["range"], body["resolution"]) == ("GPU-a2.example.com-0", "1h", "raw")
    # The -2 h sample is outside the hour; oldest first.
    assert body["points"] == [
        {"ts": iso(now - timedelta(minutes=30)), "utilization_pct": 40.2, "memory_used_mib": 2000, "power_w": 150.6,
         "temperature_c": 50.0},
        {"ts": iso(now - timedelta(seconds=10)), "utilization_pct": 60.0, "memory_used_mib": 3000, "power_w": 100.0,
         "temperature_c": 40.0},
    ]


@pytest.mark.parametrize(("range_", "utilizations"), [("1h", [40.2, 60.0]), ("6h", [20.0, 40.2, 60.0]), ("24h", [20.0, 40.2, 60.0])])
def test_ranges_inside_the_raw_window_are_raw(viewer_api, history, range_, utilizations):
    body = viewer_api.get(f"/api/v1/gpus/GPU-a2.example.com-0/series/?range={range_}").json()

    assert (body["range"], body["resolution"]) == (range_, "raw")
    assert [p["utilization_pct"] for p in body["points"]] == utilizations


def test_a_week_comes_from_rollups_plus_recent_samples_bucketed(viewer_api, history):
    body = viewer_api.get("/api/v1/gpus/GPU-a2.example.com-0/series/?range=7d").json()

    assert body["resolution"] == "5m"
    points = body["points"]
    # The -3 d rollup (its mean), then the three raw samples of the last day in their own buckets
    # (-2 h, -30 min and -10 s are in three different 5-minute buckets); -20 d is outside the week.
    assert [p["utilization_pct"] for p in points] == [33.3, 20.0, 40.2, 60.0]
    first = points[0]
    assert (first["memory_used_mib"], first["power_w"], first["temperature_c"]) == (2048, 250.3, 60.0)
    # Bucket points are stamped with the bucket start: a multiple of 300 s.
    assert all(datetime.fromisoformat(p["ts"]).timestamp() % 300 == 0 for p in points)


def test_a_month_reaches_the_older_rollups(viewer_api, history):
    body = viewer_api.get("/api/v1/gpus/GPU-a2.example.com-0/series/?range=30d").json()

    assert body["resolution"] == "5m"
    assert [p["utilization_pct"] for p in body["points"]][:2] == [77.7, 33.3]


def test_the_raw_window_follows_the_retention_setting(viewer_api, history, settings):
    settings.TELEMETRY_RAW_RETENTION_H = 168  # a week of raw samples

    body = viewer_api.get("/api/v1/gpus/GPU-a2.example.com-0/series/?range=7d").json()

    assert body["resolution"] == "raw"
    assert [p["utilization_pct"] for p in body["points"]] == [20.0, 40.2, 60.0]


def test_a_gpu_without_samples_has_no_points(viewer_api, history):
    body = viewer_api.get("/api/v1/gpus/GPU-a2.example.com-1/series/?range=24h").json()

    assert body["points"] == []


def test_the_node_series_lists_every_gpu_by_uuid_with_its_index(viewer_api, history):
    response = viewer_api.get("/api/v1/nodes/a2.example.com/series/?range=6h")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["node"], body["range"], body["resolution"]) == ("a2.example.com", "6h", "raw")
    assert set(body["gpus"]) == {"GPU-a2.example.com-0", "GPU-a2.example.com-1"}
    gpu0, gpu1 = body["gpus"]["GPU-a2.example.com-0"], body["gpus"]["GPU-a2.example.com-1"]
    assert gpu0["index"] == 0 and [p["utilization_pct"] for p in gpu0["points"]] == [20.0, 40.2, 60.0]
    assert gpu1 == {"index": 1, "points": []}


def test_the_node_series_uses_rollups_for_long_ranges(viewer_api, history):
    body = viewer_api.get("/api/v1/nodes/a2.example.com/series/?range=30d").json()

    assert body["resolution"] == "5m"
    assert [p["utilization_pct"] for p in body["gpus"]["GPU-a2.example.com-0"]["points"]] == [77.7, 33.3, 20.0, 40.2, 60.0]


@pytest.mark.parametrize("url", ["/api/v1/gpus/GPU-a2.example.com-0/series/", "/api/v1/nodes/a2.example.com/series/"])
@pytest.mark.parametrize("bad", ["2h", "", "1H", "24h;drop"])
def test_an_unknown_range_is_a_400_listing_the_choices(viewer_api, history, url, bad):
    response = viewer_api.get(url, {"range": bad})

    assert response.status_code == 400
    assert response.json() == {"range": ["Choose one of: 1h, 6h, 24h, 7d, 30d."]}


def test_unknown_gpus_and_nodes_are_404(viewer_api, history):
    assert viewer_api.get("/api/v1/gpus/GPU-nope/series/").status_code == 404
    assert viewer_api.get("/api/v1/nodes/nope/series/").status_code == 404


@pytest.mark.parametrize(
    "url", ["/api/v1/gpus/GPU-a2.example.com-0/series/", "/api/v1/nodes/a2.example.com/series/", "/api/v1/heatmap/"]
)
def test_reads_need_the_viewer_role(api, outsider, history, url):
    assert api.get(url).status_code == 401  # anonymous
    api.force_authenticate(outsider)
    assert api.get(url).status_code == 403  # signed in, no role


def test_the_series_are_read_only(api, operator, history):
    api.force_authenticate(operator)

    assert api.post("/api/v1/gpus/GPU-a2.example.com-0/series/", {}).status_code == 405


def test_the_heatmap_endpoint_serves_one_compact_row_per_node(viewer_api, history, now):
    GPU.objects.filter(uuid="GPU-a2.example.com-0").update(utilization_pct=None, power_w=None)
    GPU.objects.filter(uuid="GPU-a2.example.com-1").update(utilization_pct=55.0, power_w=210.0, sampled_at=now)

    body = viewer_api.get("/api/v1/heatmap/").json()

    assert body["columns"] == ["name", "state", "gpus", "reporting", "utilization_pct", "power_w", "allocated"]
    assert body["nodes"] == [["a2.example.com", "ready", 2, 1, 55.0, 210.0, 0.0]]
    assert (body["gpus"], body["reporting_gpus"]) == (2, 1)
    assert body["node_url"].replace("{name}", "a2.example.com") == "/nodes/a2.example.com/"


@pytest.mark.parametrize(("bucket_s", "label"), [(300, "5m"), (60, "1m"), (3600, "1h"), (7200, "2h"), (90, "90s")])
def test_bucket_labels(bucket_s, label):
    assert bucket_label(bucket_s) == label


def test_the_schema_documents_the_series_endpoints_without_warnings(tmp_path):
    path = tmp_path / "schema.yaml"
    reset_generator_stats()
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    paths = yaml.safe_load(path.read_text())["paths"]

    for url in ("/api/v1/gpus/{uuid}/series/", "/api/v1/nodes/{name}/series/", "/api/v1/heatmap/"):
        assert set(paths[url]) == {"get"}, url
    parameters = {p["name"]: p for p in paths["/api/v1/nodes/{name}/series/"]["get"]["parameters"]}
    assert set(parameters["range"]["schema"]["enum"]) == {"1h", "6h", "24h", "7d", "30d"}  # spectacular sorts them
    # 503: Prometheus, when it is the store, could not answer.
    assert set(paths["/api/v1/gpus/{uuid}/series/"]["get"]["responses"]) == {"200", "400", "404", "503"}
