"""`GET /metrics`: Prometheus text format computed from the database, process metrics, access."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from gpuplane.observability import PLACEMENT_DECISION_SECONDS
from lifecycle.audit import record
from nodes.models import GPU
from nodes.vocabulary import SharingMode
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

MIB = 1024 * 1024


def scrape(client: Client, **headers) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted label items: value}} from one scrape."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[name][tuple(sorted(labels.items()))]


@pytest.fixture
def fleet() -> None:
    """gpu-a: exclusive, 2 GPUs reporting; gpu-m: MIG, 1 GPU allocated, silent; l4: NotReady and cordoned.

    gpu-a-0: 12 % util, 8 GiB used, 300 W, 55 °C, sampled 40 s ago: idle (12 < 30, 10 % < 50 %).
    gpu-a-1: 80 % util, 70000 MiB, 650.5 W, 71 °C, sampled 5 s ago, half a GPU allocated: busy.
    gpu-m-0: no telemetry, 3g.40gb allocated (428 milli): not idle. gpu-m-1: no telemetry, free: idle.
    l4-c-0: no telemetry, free: idle.
    Idle: a-0, m-1, l4-0 = 3. Allocated: a-1, m-0 = 2.
    """
    now = timezone.now()
    make_node("gpu-a")
    make_node("gpu-m", sharing_mode=SharingMode.MIG, cordoned=True)
    make_node("l4-c", gpu_model="L4", gpu_count=1, gpu_memory_mib=23034, ready=False, cordoned=True)
    GPU.objects.filter(uuid="GPU-gpu-a-0").update(
        utilization_pct=12.0, memory_used_mib=8192, power_w=300.0, temperature_c=55.0, sampled_at=now - timedelta(seconds=40)
    )
    GPU.objects.filter(uuid="GPU-gpu-a-1").update(
        utilization_pct=80.0, memory_used_mib=70000, power_w=650.5, temperature_c=71.0, sampled_at=now - timedelta(seconds=5),
        allocated_milli=500, allocated_memory_mib=40960,
    )
    GPU.objects.filter(uuid="GPU-gpu-m-0").update(allocated_milli=428)


def test_it_counts_gpus_by_sharing_mode_with_every_mode_present(client, fleet):
    samples = scrape(client)

    assert value(samples, "gpuplane_gpus", sharing_mode="exclusive") == 3  # gpu-a's 2 + l4-c's 1
    assert value(samples, "gpuplane_gpus", sharing_mode="mig") == 2
    assert value(samples, "gpuplane_gpus", sharing_mode="mps") == 0
    assert value(samples, "gpuplane_gpus", sharing_mode="timeslice") == 0


def test_it_counts_allocated_and_idle_gpus(client, fleet):
    samples = scrape(client)

    assert value(samples, "gpuplane_gpus_allocated") == 2
    assert value(samples, "gpuplane_gpus_idle") == 3


def test_the_idle_count_follows_the_idle_settings(client, fleet, settings):
    settings.IDLE_UTILIZATION_PCT = 90  # a-1 (80 %, 70000 / 81920 = 85 % memory) still uses too much memory
    assert value(scrape(client), "gpuplane_gpus_idle") == 3
    settings.IDLE_MEMORY_PCT = 90  # now 85 % < 90 %: a-1 is idle too
    assert value(scrape(client), "gpuplane_gpus_idle") == 4


def test_it_counts_nodes_in_exactly_one_state(client, fleet):
    samples = scrape(client)

    # gpu-a ready; gpu-m ready but cordoned; l4-c NotReady (its cordon does not count twice).
    assert value(samples, "gpuplane_nodes", state="ready") == 1
    assert value(samples, "gpuplane_nodes", state="cordoned") == 1
    assert value(samples, "gpuplane_nodes", state="notready") == 1


def test_by_default_it_exports_no_series_per_gpu(client, fleet):
    samples = scrape(client)

    for name in (
        "gpuplane_gpu_utilization_percent", "gpuplane_gpu_memory_used_bytes", "gpuplane_gpu_power_watts",
        "gpuplane_gpu_temperature_celsius", "gpuplane_telemetry_age_seconds",
    ):
        assert name not in samples, name
    assert not any("uuid" in dict(labels) for series in samples.values() for labels in series)


def test_it_exports_per_node_aggregates_that_add_up_to_the_cluster_figures(client, fleet):
    samples = scrape(client)

    assert value(samples, "gpuplane_node_gpus", node="gpu-a") == 2
    assert value(samples, "gpuplane_node_gpus", node="l4-c") == 1
    assert value(samples, "gpuplane_node_gpus_allocated", node="gpu-a") == 1  # a-1
    assert value(samples, "gpuplane_node_gpus_idle", node="gpu-m") == 1  # m-1
    assert value(samples, "gpuplane_node_utilization_percent", node="gpu-a") == 46.0  # (12 + 80) / 2
    assert value(samples, "gpuplane_node_memory_used_bytes", node="gpu-a") == (8192 + 70000) * MIB
    assert value(samples, "gpuplane_node_power_watts", node="gpu-a") == 950.5
    assert value(samples, "gpuplane_power_watts") == 950.5
    # The stalest GPU's age: a-0, sampled 40 s ago.
    assert value(samples, "gpuplane_node_telemetry_age_seconds", node="gpu-a") == pytest.approx(40, abs=5)
    # Silent nodes have no telemetry series (absent, not 0).
    assert {dict(labels)["node"] for labels in samples["gpuplane_node_utilization_percent"]} == {"gpu-a"}
    assert len(samples["gpuplane_node_telemetry_age_seconds"]) == 1
    for name, cluster in (("gpuplane_node_gpus_allocated", "gpuplane_gpus_allocated"), ("gpuplane_node_gpus_idle", "gpuplane_gpus_idle")):
        assert sum(samples[name].values()) == value(samples, cluster), name
    assert sum(samples["gpuplane_node_gpus"].values()) == sum(samples["gpuplane_gpus"].values())


def test_without_any_power_reading_there_is_no_power_series(client):
    make_node("quiet", gpu_count=1)

    samples = scrape(client)

    assert "gpuplane_power_watts" not in samples
    assert value(samples, "gpuplane_node_gpus", node="quiet") == 1


def test_it_exports_latest_telemetry_per_gpu_only_where_reported(client, fleet, settings):
    settings.GPUPLANE_METRICS_PER_GPU = True
    samples = scrape(client)
    a1 = {"node": "gpu-a", "gpu": "1", "uuid": "GPU-gpu-a-1", "model": "H100-SXM5-80GB"}

    assert value(samples, "gpuplane_gpu_utilization_percent", **a1) == 80.0
    assert value(samples, "gpuplane_gpu_power_watts", **a1) == 650.5
    assert value(samples, "gpuplane_gpu_temperature_celsius", **a1) == 71.0
    assert value(samples, "gpuplane_gpu_memory_used_bytes", **a1) == 70000 * MIB
    # Silent GPUs have no series at all (absent, not 0).
    reported = {dict(labels)["uuid"] for labels in samples["gpuplane_gpu_utilization_percent"]}
    assert reported == {"GPU-gpu-a-0", "GPU-gpu-a-1"}
    assert len(samples["gpuplane_gpu_power_watts"]) == 2


def test_it_exports_telemetry_age(client, fleet, settings):
    settings.GPUPLANE_METRICS_PER_GPU = True
    samples = scrape(client)

    assert value(samples, "gpuplane_telemetry_age_seconds", node="gpu-a", gpu="0") == pytest.approx(40, abs=5)
    assert value(samples, "gpuplane_telemetry_age_seconds", node="gpu-a", gpu="1") == pytest.approx(5, abs=5)
    assert len(samples["gpuplane_telemetry_age_seconds"]) == 2  # never sampled: absent


def test_a_sample_from_a_clock_ahead_is_not_negative_age(client, fleet, settings):
    settings.GPUPLANE_METRICS_PER_GPU = True
    GPU.objects.filter(uuid__startswith="GPU-gpu-a-").update(sampled_at=timezone.now() + timedelta(seconds=60))

    samples = scrape(client)

    assert value(samples, "gpuplane_telemetry_age_seconds", node="gpu-a", gpu="0") == 0
    assert value(samples, "gpuplane_node_telemetry_age_seconds", node="gpu-a") == 0


def test_it_answers_for_an_empty_inventory(client):
    samples = scrape(client)

    assert value(samples, "gpuplane_gpus_allocated") == 0
    assert value(samples, "gpuplane_nodes", state="ready") == 0
    assert "gpuplane_gpu_utilization_percent" not in samples


def test_it_reads_the_database_in_a_fixed_number_of_queries(client, fleet, django_assert_max_num_queries):
    for n in range(5):
        make_node(f"extra-{n}", gpu_count=8)
    # The newest audit event (the cache key), twice: the scrape's entry and the per-node figures'
    # (nodes.fleet.node_figures), then nodes and GPUs summed per node; the savings gauges
    # (savings.services.current.cluster_savings): their own cache key, the occupied partitions
    # per model, the (occupant, GPU) pairs of several partitions, the partitions per shape and the
    # GPUs without partitions.
    with django_assert_max_num_queries(9):
        response = client.get("/metrics")

    # A fast error page must not pass for a cheap scrape: the figures cover the added nodes.
    assert response.status_code == 200, response.content[:300]
    assert 'gpuplane_gpus{sharing_mode="exclusive"} 43.0' in response.content.decode()  # 3 + 5 x 8


def test_the_inventory_figures_are_kept_for_one_poll_interval(client, fleet, django_assert_max_num_queries):
    before = value(scrape(client), "gpuplane_gpus_allocated")
    GPU.objects.filter(uuid="GPU-gpu-m-1").update(allocated_milli=1000)  # no audit event: telemetry-like

    with django_assert_max_num_queries(1):  # the audit mark only: the figures come from the cache
        assert value(scrape(client), "gpuplane_gpus_allocated") == before
    record("gpu.allocated", GPU.objects.get(uuid="GPU-gpu-m-1"))  # a change of state: seen at once
    assert value(scrape(client), "gpuplane_gpus_allocated") == before + 1


def test_it_exposes_the_placement_latency_histogram(client):
    before = scrape(client)
    count_before = value(before, "gpuplane_placement_decision_seconds_count")
    fast_before = value(before, "gpuplane_placement_decision_seconds_bucket", le="0.001")

    PLACEMENT_DECISION_SECONDS.observe(0.0008)
    PLACEMENT_DECISION_SECONDS.observe(0.3)
    after = scrape(client)

    assert value(after, "gpuplane_placement_decision_seconds_count") == count_before + 2
    assert value(after, "gpuplane_placement_decision_seconds_bucket", le="0.001") == fast_before + 1
    les = {dict(labels)["le"] for labels in after["gpuplane_placement_decision_seconds_bucket"]}
    assert {"0.0005", "1.0", "+Inf"} <= les


def test_in_multiprocess_mode_it_merges_the_process_files(client, fleet, tmp_path, monkeypatch):
    """With PROMETHEUS_MULTIPROC_DIR (several web/worker processes), process metrics come from the
    shared directory; the database gauges are the same."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))

    samples = scrape(client)

    assert value(samples, "gpuplane_gpus_idle") == 3
    # Nothing was recorded in the (empty) directory, and this process's own registry is not read.
    assert "gpuplane_placement_decision_seconds_count" not in samples


def test_it_speaks_openmetrics_when_asked(client, fleet):
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")

    assert response["Content-Type"].startswith("application/openmetrics-text")
    body = response.content.decode()
    assert body.rstrip().endswith("# EOF")
    assert 'gpuplane_gpus{sharing_mode="mig"} 2' in body


# --- access -----------------------------------------------------------------------------------


def test_it_is_open_without_a_configured_token(client, settings):
    settings.GPUPLANE_METRICS_TOKEN = ""

    assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", "Token s3cret-scrape-token", "Bearer", "s3cret-scrape-token"],
)
def test_it_refuses_a_scrape_without_the_configured_token(client, settings, authorization):
    settings.GPUPLANE_METRICS_TOKEN = "s3cret-scrape-token"
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}

    response = client.get("/metrics", **headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"gpuplane_gpus" not in response.content


def test_it_serves_a_scrape_with_the_configured_token(client, settings, fleet):
    settings.GPUPLANE_METRICS_TOKEN = "s3cret-scrape-token"

    samples = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")

    assert value(samples, "gpuplane_gpus_idle") == 3


def test_it_only_answers_get(client):
    assert client.post("/metrics").status_code == 405
