"""nodes.telemetry.readings.store_readings: a collector's readings in, what was stored and left out back."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nodes.collectors.base import GPUReading, empty_reading
from nodes.models import GPU, GPUSample
from nodes.telemetry.readings import StoreReport, store_readings
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


def reading(gpu_uuid: str, ts: datetime, **metrics: float | int | None) -> GPUReading:
    values: dict[str, Any] = {"utilization_pct": 10.0, "memory_used_mib": 100, "memory_total_mib": 81559, "power_w": 120.0,
              "temperature_c": 40.0, "sm_clock_mhz": 1980, **metrics}
    return GPUReading(gpu_uuid=gpu_uuid, index=0, ts=ts, power_limit_w=700.0, mig_enabled=False, **values)


@pytest.fixture
def now() -> datetime:
    return timezone.now().replace(microsecond=0)


def test_it_stores_what_it_can_and_counts_what_it_leaves_out(now):
    make_node("n1", gpu_count=3)
    readings = [
        reading("GPU-n1-0", now, utilization_pct=55.0),
        reading("GPU-not-in-inventory", now),
        empty_reading("GPU-n1-1", 1, now),
        reading("GPU-n1-2", now, temperature_c=900.0),
    ]

    report = store_readings(readings, source="dcgm", now=now)

    assert report == StoreReport(
        source="dcgm", readings=4, stored=1, duplicates=0, unknown_gpus=1, empty=1, rejected=1
    )
    assert list(GPUSample.objects.values_list("gpu__uuid", "utilization_pct", "source")) == [
        ("GPU-n1-0", 55.0, "dcgm")
    ]
    assert GPU.objects.get(uuid="GPU-n1-0").sampled_at == now


@pytest.mark.parametrize(
    "metrics",
    [
        {"power_w": 1.7e308},  # past any GPU
        {"power_w": float("inf")},
        {"temperature_c": float("nan")},
        {"memory_used_mib": 10**400},
        {"power_w": 1100.0},  # past 1.5 x the 700 W TDP of an H100-SXM5-80GB
        {"memory_used_mib": 90000},  # past the GPU's 81920 MiB
        {"sm_clock_mhz": 2600},  # past 1.25 x its 1980 MHz maximum clock
    ],
    ids=repr,
)
def test_it_drops_a_reading_past_physical_limits_and_stores_the_rest(now, metrics):
    make_node("n1", gpu_count=2)
    readings = [reading("GPU-n1-0", now), reading("GPU-n1-1", now, **metrics)]

    report = store_readings(readings, source="nvml", now=now)

    assert (report.stored, report.rejected) == (1, 1)
    assert list(GPUSample.objects.values_list("gpu__uuid", flat=True)) == ["GPU-n1-0"]
    assert GPU.objects.get(uuid="GPU-n1-1").sampled_at is None


def test_it_reads_the_gpu_table_once_even_when_it_drops_a_sample(now):
    make_node("n1", gpu_count=2)
    readings = [reading("GPU-n1-0", now), reading("GPU-n1-1", now, utilization_pct=250.0)]

    with CaptureQueriesContext(connection) as captured:
        report = store_readings(readings, source="dcgm", now=now)

    gpu_reads = [q["sql"] for q in captured if q["sql"].startswith("SELECT") and 'FROM "nodes_gpu"' in q["sql"]]
    assert len(gpu_reads) == 1, gpu_reads
    assert (report.stored, report.rejected) == (1, 1)


def test_it_logs_each_dropped_sample_with_its_reason(now, caplog):
    make_node("n1", gpu_count=1)

    with caplog.at_level(logging.WARNING, logger="nodes.telemetry.readings"):
        store_readings([reading("GPU-n1-0", now, temperature_c=900.0)], source="dcgm", now=now)

    assert "1 sample(s) refused and dropped" in caplog.text
    assert "temperature_c" in caplog.text and "900.0" in caplog.text


def test_a_second_store_of_the_same_readings_counts_duplicates(now):
    make_node("n1", gpu_count=2)
    readings = [reading("GPU-n1-0", now), reading("GPU-n1-1", now)]
    store_readings(readings, source="dcgm", now=now)

    again = store_readings(readings, source="dcgm", now=now)

    assert (again.stored, again.duplicates) == (0, 2)
    assert GPUSample.objects.count() == 2


def test_when_every_sample_is_dropped_nothing_is_written(now):
    make_node("n1", gpu_count=1)

    report = store_readings([reading("GPU-n1-0", now + timedelta(hours=1))], source="dcgm", now=now)

    assert (report.stored, report.duplicates, report.rejected) == (0, 0, 1)
    assert not GPUSample.objects.exists()
    assert GPU.objects.get().sampled_at is None


def test_the_api_batch_limit_does_not_bound_what_the_server_stores(now, settings):
    # TELEMETRY_MAX_BATCH protects the API; a poll above it once stopped telemetry fleet-wide.
    settings.TELEMETRY_MAX_BATCH = 1
    make_node("n1", gpu_count=2)

    report = store_readings([reading("GPU-n1-0", now), reading("GPU-n1-1", now)], source="dcgm", now=now)

    assert report.stored == 2
    assert GPUSample.objects.count() == 2


def test_a_fleet_of_uuids_is_resolved_by_one_read_of_the_table_not_an_in_list(now, monkeypatch):
    # A fleet's UUIDs in one IN list would pass SQLite's bound-parameter limit.
    monkeypatch.setattr("nodes.telemetry.storage.RESOLVE_IN_LIST_MAX", 2)
    make_node("n1", gpu_count=5)
    make_node("other", gpu_count=1)  # read, but not one of the wanted GPUs
    readings = [reading(f"GPU-n1-{i}", now) for i in range(5)] + [reading("GPU-not-in-inventory", now)]

    with CaptureQueriesContext(connection) as captured:
        report = store_readings(readings, source="dcgm", now=now)

    gpu_reads = [q["sql"] for q in captured if q["sql"].startswith("SELECT") and 'FROM "nodes_gpu"' in q["sql"]]
    assert len(gpu_reads) == 1 and " IN (" not in gpu_reads[0]
    assert (report.stored, report.unknown_gpus) == (5, 1)
    assert set(GPUSample.objects.values_list("gpu__node__name", flat=True)) == {"n1"}


def test_the_report_keeps_the_poll_summarys_key_order(now):
    report = store_readings([], source="simulated", now=now)

    assert list(report.as_dict()) == [
        "source", "readings", "stored", "duplicates", "unknown_gpus", "empty", "rejected"
    ]
