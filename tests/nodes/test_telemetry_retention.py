"""Retention and rollup with controlled time: rollup_and_expire(now), gpu_series / node_series.

Settings in every test: raw samples kept 24 h, 300 s buckets, buckets kept 30 days.
NOW = 2026-03-02 12:02, so NOW - 24 h = 03-01 12:02 and the cutoff is the start of its bucket,
03-01 12:00: everything before 12:00 is rolled up; 12:00-12:05 is not wholly expired yet.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodes.models import GPU, GPUSample, GPUSampleRollup
from nodes.telemetry.buckets import bucket_start
from nodes.telemetry.rollup import RollupReport, rollup_and_expire
from nodes.telemetry.series import gpu_series, node_series
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 2, tzinfo=UTC)
CUTOFF = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(hh: int, mm: int, ss: int = 0, day: int = 1) -> datetime:
    return datetime(2026, 3, day, hh, mm, ss, tzinfo=UTC)


@pytest.fixture(autouse=True)
def retention(settings):
    settings.TELEMETRY_RAW_RETENTION_H = 24
    settings.TELEMETRY_ROLLUP_BUCKET_S = 300
    settings.TELEMETRY_ROLLUP_RETENTION_D = 30


@pytest.fixture
def gpus(db) -> tuple[GPU, GPU]:
    node = make_node("n1", gpu_count=2)
    return tuple(node.gpus.order_by("index"))  # type: ignore[return-value]


def raw(gpu: GPU, ts: datetime, utilization_pct=None, power_w=None, memory_used_mib=None, temperature_c=None):
    return GPUSample.objects.create(
        gpu=gpu, ts=ts, utilization_pct=utilization_pct, power_w=power_w, memory_used_mib=memory_used_mib,
        temperature_c=temperature_c,
    )


def rollups() -> list[tuple]:
    return list(
        GPUSampleRollup.objects.order_by("gpu__index", "bucket_start").values_list(
            "gpu__index", "bucket_start", "bucket_s", "samples",
            "utilization_pct_avg", "utilization_pct_max", "power_w_avg", "power_w_max",
            "memory_used_mib_avg", "memory_used_mib_max", "temperature_c_avg", "temperature_c_max",
        )
    )


@pytest.fixture
def history(gpus):
    gpu0, gpu1 = gpus
    # gpu0, bucket 10:00: utilization 10, 20, 60; power 100, 200 and one missing.
    raw(gpu0, at(10, 0, 0), utilization_pct=10.0, power_w=100.0, memory_used_mib=1000)
    raw(gpu0, at(10, 1, 0), utilization_pct=20.0, power_w=200.0, memory_used_mib=3000)
    raw(gpu0, at(10, 4, 59), utilization_pct=60.0, power_w=None, memory_used_mib=2000)
    # gpu0, bucket 10:05 (10:05:00 starts a new bucket).
    raw(gpu0, at(10, 5, 0), utilization_pct=50.0, temperature_c=40.0)
    # gpu0, the last bucket before the cutoff.
    raw(gpu0, at(11, 59, 59), utilization_pct=5.0)
    # gpu0, six hours earlier: a backlog longer than one rollup chunk (12 buckets = 1 h).
    raw(gpu0, at(4, 0, 0), utilization_pct=1.0)
    # gpu1, bucket 10:00, no metrics at all (a lost GPU).
    raw(gpu1, at(10, 2, 0))
    # Kept raw: at the cutoff (its bucket is not wholly expired) and newer than 24 h.
    raw(gpu0, at(12, 0, 0), utilization_pct=99.0)
    raw(gpu0, at(12, 3, 0), utilization_pct=98.0)
    return gpus


def test_bucket_start_aligns_to_the_epoch():
    assert bucket_start(at(10, 4, 59), 300) == at(10, 0)
    assert bucket_start(at(10, 5, 0), 300) == at(10, 5)
    assert bucket_start(at(10, 5, 0).replace(microsecond=999_999), 300) == at(10, 5)


def test_it_rolls_up_expired_samples_into_buckets(history):
    report = rollup_and_expire(NOW)

    assert report == RollupReport(cutoff=CUTOFF, samples_rolled_up=7, rollups_written=5, rollups_expired=0)
    assert rollups() == [
        # index, bucket, s, n, util avg, util max, power avg, power max, mem avg, mem max, temp avg, temp max
        (0, at(4, 0), 300, 1, 1.0, 1.0, None, None, None, None, None, None),
        # (10+20+60)/3 = 30, max 60; power over the two samples that had it: (100+200)/2 = 150, max 200;
        # memory (1000+3000+2000)/3 = 2000, max 3000.
        (0, at(10, 0), 300, 3, 30.0, 60.0, 150.0, 200.0, 2000.0, 3000, None, None),
        (0, at(10, 5), 300, 1, 50.0, 50.0, None, None, None, None, 40.0, 40.0),
        (0, at(11, 55), 300, 1, 5.0, 5.0, None, None, None, None, None, None),
        # A sample without metrics still counts as a sample; its means stay null, not 0.
        (1, at(10, 0), 300, 1, None, None, None, None, None, None, None, None),
    ]
    assert list(GPUSample.objects.order_by("ts").values_list("ts", flat=True)) == [at(12, 0), at(12, 3)]


def test_a_second_run_with_the_same_time_changes_nothing(history):
    rollup_and_expire(NOW)
    first = rollups()

    report = rollup_and_expire(NOW)

    assert report == RollupReport(cutoff=CUTOFF, samples_rolled_up=0, rollups_written=0, rollups_expired=0)
    assert rollups() == first
    assert GPUSample.objects.count() == 2


def test_the_next_bucket_is_rolled_once_it_has_wholly_expired(history):
    rollup_and_expire(NOW)

    # 5 minutes later the cutoff moves to 12:05: the 12:00 and 12:03 samples' bucket expires.
    report = rollup_and_expire(NOW + timedelta(minutes=5))

    assert report.cutoff == at(12, 5)
    assert report.samples_rolled_up == 2
    # (99+98)/2 = 98.5, max 99
    assert rollups()[-2][:6] == (0, at(12, 0), 300, 2, 98.5, 99.0)
    assert GPUSample.objects.count() == 0


def test_a_late_sample_is_merged_into_its_rolled_up_bucket(history):
    rollup_and_expire(NOW)
    gpu0 = history[0]
    raw(gpu0, at(10, 2, 30), utilization_pct=70.0, power_w=300.0)  # an agent back from a long outage

    report = rollup_and_expire(NOW)

    assert report.samples_rolled_up == 1 and report.rollups_written == 1
    bucket = GPUSampleRollup.objects.get(gpu=gpu0, bucket_start=at(10, 0))
    assert bucket.samples == 4
    # utilization: (30*3 + 70)/4 = 40, max 70; power is weighted by sample counts, (150*3 + 300)/4 = 187.5
    assert (bucket.utilization_pct_avg, bucket.utilization_pct_max) == (40.0, 70.0)
    assert (bucket.power_w_avg, bucket.power_w_max) == (187.5, 300.0)


def test_it_deletes_buckets_older_than_their_retention(gpus):
    gpu0, _ = gpus
    old = NOW - timedelta(days=30)  # 2026-01-31 12:02
    GPUSampleRollup.objects.create(gpu=gpu0, bucket_start=old - timedelta(minutes=2), samples=1)
    GPUSampleRollup.objects.create(gpu=gpu0, bucket_start=old + timedelta(minutes=3), samples=1)

    report = rollup_and_expire(NOW)

    assert report.rollups_expired == 1
    assert list(GPUSampleRollup.objects.values_list("bucket_start", flat=True)) == [old + timedelta(minutes=3)]


def test_it_follows_the_retention_settings(gpus, settings):
    settings.TELEMETRY_RAW_RETENTION_H = 1
    settings.TELEMETRY_ROLLUP_BUCKET_S = 600
    gpu0, _ = gpus
    raw(gpu0, at(10, 55, day=2), utilization_pct=10.0)  # NOW - 1 h = 11:02, cutoff 11:00 (10-minute buckets)
    raw(gpu0, at(10, 52, day=2), utilization_pct=30.0)
    raw(gpu0, at(11, 0, day=2), utilization_pct=90.0)

    report = rollup_and_expire(NOW)

    assert report.cutoff == at(11, 0, day=2)
    # 10:52 and 10:55 share the 10:50 bucket: (10+30)/2 = 20
    assert rollups() == [(0, at(10, 50, day=2), 600, 2, 20.0, 30.0, None, None, None, None, None, None)]
    assert GPUSample.objects.count() == 1


def test_it_uses_the_current_time_by_default(gpus):
    gpu0, _ = gpus
    from django.utils import timezone

    raw(gpu0, timezone.now() - timedelta(days=2), utilization_pct=10.0)
    raw(gpu0, timezone.now(), utilization_pct=20.0)

    assert rollup_and_expire().samples_rolled_up == 1


# --- series for the charts ----------------------------------------------------------------------


def test_a_range_within_raw_retention_reads_raw_samples(history):
    gpu0, _ = history

    points = gpu_series(gpu0, at(11, 0), at(12, 1), now=at(12, 5))

    assert points == [
        {"ts": at(11, 59, 59), "utilization_pct": 5.0, "memory_used_mib": None, "power_w": None, "temperature_c": None},
        {"ts": at(12, 0), "utilization_pct": 99.0, "memory_used_mib": None, "power_w": None, "temperature_c": None},
    ]


def test_a_longer_range_reads_buckets_and_buckets_the_recent_raw_samples_too(history):
    gpu0, _ = history
    rollup_and_expire(NOW)

    points = gpu_series(gpu0, at(9, 58), NOW, now=NOW)

    assert [(p["ts"], p["samples"], p["utilization_pct"], p["utilization_pct_max"]) for p in points] == [
        (at(10, 0), 3, 30.0, 60.0),  # bucket rows
        (at(10, 5), 1, 50.0, 50.0),
        (at(11, 55), 1, 5.0, 5.0),
        (at(12, 0), 2, 98.5, 99.0),  # 12:00 and 12:03 raw, bucketed on the fly: (99+98)/2
    ]
    assert points[0]["memory_used_mib"] == 2000 and points[0]["power_w"] == 150.0


def test_node_series_lists_every_gpu_even_without_data(history):
    gpu0, gpu1 = history

    series = node_series(gpu0.node, at(11, 0), at(12, 10), now=at(12, 10))

    assert list(series) == ["GPU-n1-0", "GPU-n1-1"]
    assert [p["utilization_pct"] for p in series["GPU-n1-0"]] == [5.0, 99.0, 98.0]
    assert series["GPU-n1-1"] == []
