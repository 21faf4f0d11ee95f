"""poll_metrics_task and rollup_telemetry_task: collect -> store, one run per slot, no overlap."""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from gpuplane.celery import app
from nodes import tasks
from nodes.collectors.base import SAMPLE_FIELDS, CollectorUnavailable, GPUReading, empty_reading
from nodes.collectors.simulated import SimulatedCollector
from nodes.demo import load_demo_cluster
from nodes.models import GPU, GPUSample, GPUSampleRollup
from nodes.tasks import POLL_LOCK_KEY, ROLLUP_LOCK_KEY, poll_metrics_task, rollup_telemetry_task
from nodes.telemetry.samples import METRIC_FIELDS
from tests.nodes.factories import make_node


@pytest.fixture(autouse=True)
def private_cache_keys(settings):
    """A key prefix of our own: slot claims and locks of other tests or a running `make run` never meet ours."""
    settings.CACHES = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}
    # An hour-long slot: two calls in one test never straddle a slot boundary by accident.
    settings.TELEMETRY_POLL_INTERVAL_S = 3600
    settings.GPUPLANE_TELEMETRY_SOURCE = "simulated"
    yield
    # Leave nothing behind in a shared Redis (a slot claim would otherwise live two hours).
    cache.delete_many([tasks.POLL_SLOT_KEY.format(slot=int(time.time() // 3600)), POLL_LOCK_KEY, ROLLUP_LOCK_KEY])


def reading(gpu_uuid: str, ts: datetime, **metrics: float | int | None) -> GPUReading:
    values = {"utilization_pct": 10.0, "memory_used_mib": 100, "memory_total_mib": 81559, "power_w": 120.0,
              "temperature_c": 40.0, "sm_clock_mhz": 1980, **metrics}
    return GPUReading(gpu_uuid=gpu_uuid, index=0, ts=ts, power_limit_w=700.0, mig_enabled=False, **values)


class StubCollector:
    name = "dcgm"

    def __init__(self, readings: list[GPUReading] | Exception) -> None:
        self.readings = readings
        self.calls = 0

    def collect(self) -> list[GPUReading]:
        self.calls += 1
        if isinstance(self.readings, Exception):
            raise self.readings
        return self.readings


def use_collector(monkeypatch, collector: object) -> None:
    monkeypatch.setattr(tasks, "get_collector", lambda: collector)


def next_slot(settings) -> None:
    """Act as if the next interval had begun: forget the claim of the current slot."""
    cache.delete(tasks.POLL_SLOT_KEY.format(slot=int(time.time() // settings.TELEMETRY_POLL_INTERVAL_S)))


@pytest.mark.django_db
def test_it_stores_one_sample_per_gpu_and_sets_the_latest_values(monkeypatch):
    make_node("h100-node-1", gpu_count=2)
    when = timezone.now().replace(microsecond=0) - timedelta(seconds=5)
    use_collector(monkeypatch, SimulatedCollector(seed=3, clock=lambda: when))

    result = poll_metrics_task.apply().get()

    assert result["source"] == "simulated"
    assert (result["readings"], result["stored"], result["duplicates"]) == (2, 2, 0)
    assert (result["unknown_gpus"], result["empty"], result["rejected"]) == (0, 0, 0)
    samples = list(GPUSample.objects.order_by("gpu__index"))
    assert [s.gpu.uuid for s in samples] == ["GPU-h100-node-1-0", "GPU-h100-node-1-1"]
    assert all(s.ts == when and s.source == "simulated" for s in samples)
    for gpu in GPU.objects.all():
        assert gpu.sampled_at == when
        assert gpu.utilization_pct is not None and 0 <= gpu.utilization_pct <= 3  # nothing runs: idle
        assert gpu.power_w is not None and gpu.temperature_c is not None
    assert cache.get(POLL_LOCK_KEY) is None  # released


@pytest.mark.django_db
def test_after_storing_it_refreshes_the_fleet_pages_and_a_failed_refresh_fails_nothing(monkeypatch, settings):
    make_node("h100-node-1", gpu_count=1)
    use_collector(monkeypatch, SimulatedCollector(seed=3, clock=lambda: timezone.now() - timedelta(seconds=5)))
    stored_when_refreshed: list[int] = []
    monkeypatch.setattr(tasks, "refresh_per_poll", lambda: stored_when_refreshed.append(GPUSample.objects.count()))
    assert poll_metrics_task.apply().get()["stored"] == 1
    assert stored_when_refreshed == [1]  # after the readings were stored

    def failing() -> None:
        raise RuntimeError("cache down")

    monkeypatch.setattr(tasks, "refresh_per_poll", failing)
    next_slot(settings)
    result = poll_metrics_task.apply()
    assert result.successful() and result.get()["readings"] == 1


@pytest.mark.django_db
def test_unknown_gpus_empty_readings_and_refused_values_are_left_out_and_counted(monkeypatch):
    make_node("n1", gpu_count=3)
    now = timezone.now().replace(microsecond=0)
    use_collector(monkeypatch, StubCollector([
        reading("GPU-n1-0", now, utilization_pct=55.0),
        reading("GPU-not-in-inventory", now),
        empty_reading("GPU-n1-1", 1, now),  # a lost GPU: nothing to store
        reading("GPU-n1-2", now, temperature_c=900.0),  # out of range: refused by storage
    ]))

    result = poll_metrics_task.apply().get()

    assert (result["readings"], result["stored"], result["unknown_gpus"], result["empty"], result["rejected"]) == (4, 1, 1, 1, 1)
    assert list(GPUSample.objects.values_list("gpu__uuid", "utilization_pct")) == [("GPU-n1-0", 55.0)]
    assert GPU.objects.get(uuid="GPU-n1-1").sampled_at is None


@pytest.mark.django_db
def test_a_second_run_in_the_same_slot_does_nothing(monkeypatch):
    make_node("n1", gpu_count=1)
    collector = StubCollector([reading("GPU-n1-0", timezone.now().replace(microsecond=0))])
    use_collector(monkeypatch, collector)

    first = poll_metrics_task.apply().get()
    second = poll_metrics_task.apply().get()

    assert first["stored"] == 1
    assert second == {"skipped": True, "reason": "slot already polled", "slot": first["slot"]}
    assert collector.calls == 1  # the second beat's message does not even read the GPUs
    assert GPUSample.objects.count() == 1


@pytest.mark.django_db
def test_it_does_not_overlap_a_run_still_going(monkeypatch):
    make_node("n1", gpu_count=1)
    collector = StubCollector([reading("GPU-n1-0", timezone.now().replace(microsecond=0))])
    use_collector(monkeypatch, collector)
    cache.add(POLL_LOCK_KEY, "a-slow-previous-run", timeout=60)

    result = poll_metrics_task.apply().get()

    assert result["skipped"] is True and result["reason"] == "previous poll still running"
    assert collector.calls == 0
    assert cache.get(POLL_LOCK_KEY) == "a-slow-previous-run"  # not ours to release


@pytest.mark.django_db
def test_a_failing_collector_fails_the_run_visibly_and_releases_the_lock(monkeypatch):
    use_collector(monkeypatch, StubCollector(CollectorUnavailable("Prometheus at http://p:9090 is unreachable")))

    result = poll_metrics_task.apply()

    assert result.failed() and isinstance(result.result, CollectorUnavailable)
    assert cache.get(POLL_LOCK_KEY) is None


@pytest.mark.django_db
def test_with_no_source_the_server_polls_nothing(settings):
    settings.GPUPLANE_TELEMETRY_SOURCE = "none"

    result = poll_metrics_task.apply().get()

    assert result["skipped"] is True and "none" in result["reason"]


@pytest.mark.django_db
def test_the_demo_cluster_charts_fill_on_every_poll(monkeypatch, settings):
    """What `make run` does every 30 s: the simulated source on the demo cluster."""
    load_demo_cluster()
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=3)
    clock = {"now": start}
    use_collector(monkeypatch, SimulatedCollector(seed=settings.TELEMETRY_SIMULATION_SEED, clock=lambda: clock["now"]))
    gpus = GPU.objects.count()

    for poll in range(3):
        clock["now"] = start + timedelta(seconds=30 * poll)
        next_slot(settings)
        result = poll_metrics_task.apply().get()
        assert result["stored"] == gpus, result

    assert gpus == 80
    assert GPUSample.objects.count() == 3 * gpus
    assert not GPU.objects.filter(sampled_at__isnull=True).exists()
    assert set(GPU.objects.values_list("sampled_at", flat=True)) == {start + timedelta(seconds=60)}
    # The 4-GPU fine-tune runs hot; an empty exclusive H100 idles.
    busy = GPU.objects.get(node__name="h100-node-1", index=0)
    idle = GPU.objects.get(node__name="h100-node-2", index=7)
    assert busy.utilization_pct > 70 > 3 >= idle.utilization_pct
    assert busy.power_w > idle.power_w


def test_readings_carry_exactly_the_metrics_storage_accepts():
    # The collectors' list and storage's list are declared apart, so the two are pinned equal here.
    assert SAMPLE_FIELDS == METRIC_FIELDS


@pytest.mark.django_db
def test_the_default_collector_follows_the_setting(settings):
    from nodes.collectors.backends import get_collector
    from nodes.collectors.prometheus import DCGMPrometheusCollector

    settings.GPUPLANE_TELEMETRY_SOURCE = "simulated"
    settings.TELEMETRY_SIMULATION_SEED = 9
    simulated = get_collector()
    assert isinstance(simulated, SimulatedCollector) and simulated.seed == 9

    settings.GPUPLANE_TELEMETRY_SOURCE = "dcgm"
    settings.GPUPLANE_PROMETHEUS_URL = "http://prometheus.monitoring:9090/"
    dcgm = get_collector()
    assert isinstance(dcgm, DCGMPrometheusCollector) and dcgm.url == "http://prometheus.monitoring:9090"

    settings.GPUPLANE_TELEMETRY_SOURCE = "none"
    assert get_collector() is None


@pytest.mark.django_db
def test_rollup_task_rolls_expired_samples_up(settings):
    node = make_node("n1", gpu_count=1)
    gpu = node.gpus.get()
    old = timezone.now() - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H + 2)
    old = old.replace(minute=0, second=0, microsecond=0)
    GPUSample.objects.bulk_create(
        [GPUSample(gpu=gpu, ts=old + timedelta(seconds=30 * i), utilization_pct=10.0 * i) for i in range(4)]
    )

    result = rollup_telemetry_task.apply().get()

    assert result["samples_rolled_up"] == 4
    assert not GPUSample.objects.exists()
    bucket = GPUSampleRollup.objects.get()
    assert (bucket.samples, bucket.utilization_pct_avg, bucket.utilization_pct_max) == (4, 15.0, 30.0)


@pytest.mark.django_db
def test_rollup_task_does_not_overlap(settings):
    cache.add(ROLLUP_LOCK_KEY, "running", timeout=60)

    assert rollup_telemetry_task.apply().get() == {"skipped": True, "reason": "previous rollup still running"}


@pytest.mark.parametrize(("entry", "task"), [("poll-metrics", poll_metrics_task), ("rollup-telemetry", rollup_telemetry_task)])
def test_tasks_are_registered_under_the_beat_names_with_time_limits_and_expiry(entry, task):
    beat = settings.CELERY_BEAT_SCHEDULE[entry]
    assert beat["task"] == task.name
    registered = app.tasks[beat["task"]]
    assert 0 < registered.soft_time_limit < registered.time_limit
    # A message not started before the next one is due expires; a run ends before the next is due.
    assert beat["options"]["expires"] < beat["schedule"]
    assert registered.time_limit <= beat["schedule"]
