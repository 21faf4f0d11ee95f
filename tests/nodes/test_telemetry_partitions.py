"""PostgreSQL's time-partitioned raw samples (nodes.telemetry.partitions, migration nodes/0009):
where samples land, partitions made on demand, expiry by DROP, COPY inserts, same chart values.

Settings: raw samples kept 24 h (one-hour partitions), 300 s buckets, buckets kept 30 days.
NOW = 2026-03-02 12:02, so the cutoff is 03-01 12:00: the partitions of 03-01 11:00 and before
lie wholly past retention; the one of 12:00-13:00 does not (its 12:00-12:05 bucket is still raw).
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nodes.collectors.base import GPUReading
from nodes.models import GPU, GPUSample, GPUSampleRollup
from nodes.telemetry import partitions
from nodes.telemetry.partitions import (
    DEFAULT_PARTITION,
    create_ahead,
    ensure_partitions,
    partition_name,
    partition_start,
    sample_partitions,
)
from nodes.telemetry.poll import store_poll
from nodes.telemetry.rollup import rollup_and_expire
from nodes.telemetry.series import node_series
from tests.nodes.factories import make_node
from tests.nodes.test_telemetry_retention import CUTOFF, NOW, at  # the same clock and retention

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql",
                       reason="needs PostgreSQL: SQLite keeps one plain sample table, expired by DELETE"),
]

@pytest.fixture(autouse=True)
def retention(settings):
    settings.TELEMETRY_RAW_RETENTION_H = 24
    settings.TELEMETRY_ROLLUP_BUCKET_S = 300
    settings.TELEMETRY_ROLLUP_RETENTION_D = 30
    settings.GPUPLANE_PROMETHEUS_URL = ""
    partitions.forget()
    yield
    partitions.forget()


@pytest.fixture
def gpus(db) -> list[GPU]:
    node = make_node("n1", gpu_count=2)
    return list(node.gpus.order_by("index"))


def reading(gpu: GPU, ts: datetime, utilization_pct: float = 10.0, power_w: float = 120.0) -> GPUReading:
    return GPUReading(gpu_uuid=gpu.uuid, index=gpu.index, ts=ts, utilization_pct=utilization_pct,
                      memory_used_mib=100, memory_total_mib=81920, power_w=power_w, power_limit_w=700.0,
                      temperature_c=40.0, sm_clock_mhz=1980, mig_enabled=False)


def poll(gpus: list[GPU], ts: datetime, now: datetime = NOW, **metrics: float):
    return store_poll([reading(gpu, ts, **metrics) for gpu in gpus], source="simulated", shard_nodes=1, now=now)


def where() -> dict[datetime, str]:
    """ts -> the partition each stored sample is in (every GPU's sample of one ts lands together)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT ts, tableoid::regclass::text FROM {partitions.SAMPLE_TABLE}")
        return dict(cursor.fetchall())


def names_between(start: datetime, end: datetime) -> list[str]:
    return [p.name for p in sample_partitions() if start <= p.start < end]


def test_the_sample_table_is_partitioned_by_time_with_the_partition_key_in_its_unique_keys(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [partitions.SAMPLE_TABLE])
        assert cursor.fetchone()[0] == "p"
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = to_regclass(%s) "
            "AND contype IN ('p', 'u') ORDER BY conname",
            [partitions.SAMPLE_TABLE],
        )
        assert cursor.fetchall() == [
            ("gpusample_unique_gpu_ts", "UNIQUE (gpu_id, ts)"),
            ("nodes_gpusample_pkey", "PRIMARY KEY (id, ts)"),
        ]
    assert partitions.partitioned()


def test_polls_land_in_the_partition_of_their_hour_made_on_demand(gpus):
    times = [at(10, 59, 30, day=2), at(11, 0, day=2), at(12, 1, day=2)]
    assert names_between(at(0, 0, day=2), at(0, 0, day=3)) == []

    for ts in times:
        report = poll(gpus, ts)
        assert (report.stored, report.lost) == (2, 0)

    assert where() == {
        times[0]: "nodes_gpusample_p2026030210",
        times[1]: "nodes_gpusample_p2026030211",
        times[2]: "nodes_gpusample_p2026030212",
    }
    assert GPUSample.objects.count() == 6


def test_a_poll_whose_partition_was_dropped_behind_this_process_still_stores_everything(gpus):
    ts = at(12, 0, day=2)
    ensure_partitions([ts])
    # Another process drops it; this one still believes it exists (its cache is only a hint).
    partitions._known.add((connection.settings_dict["NAME"], partition_start(ts)))
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {partition_name(partition_start(ts))}")

    report = poll(gpus, ts)

    assert (report.stored, report.lost, report.failed_shards) == (2, 0, 0)
    assert where() == {ts: DEFAULT_PARTITION}
    # The next maintenance makes the partition again and moves the rows out of the default one.
    partitions.forget()
    assert create_ahead(ts) == 3
    assert where() == {ts: "nodes_gpusample_p2026030212"}
    assert GPUSample.objects.filter(ts=ts).count() == 2


def test_a_poll_is_copied_in_and_a_resent_one_counts_as_duplicates(gpus):
    ensure_partitions([NOW])
    with CaptureQueriesContext(connection) as captured:
        first = poll(gpus, NOW)
    again = poll(gpus, NOW, utilization_pct=99.0)

    assert not [q["sql"] for q in captured if "INSERT" in q["sql"] and partitions.SAMPLE_TABLE in q["sql"]]
    assert (first.stored, first.duplicates) == (2, 0)
    assert (again.stored, again.duplicates, again.lost) == (0, 2, 0)
    assert list(GPUSample.objects.values_list("utilization_pct", flat=True)) == [10.0, 10.0]


@pytest.fixture
def day_of_polls(gpus):
    """Polls with varying values every 150 s (two per bucket) from 03-01 09:00 to 13:00, then every
    30 minutes to 03-02 12:00; two implausible power readings in hours that expire."""
    times = [at(9, 0) + timedelta(seconds=150 * k) for k in range(4 * 24)]
    times += [at(13, 0) + timedelta(minutes=30 * k) for k in range(47)]
    for step, ts in enumerate(times):
        poll(gpus, ts, utilization_pct=float(step * 7 % 101), power_w=100.0 + step % 7)
    # Rows stored before the bounds (or by SQL): rollups and charts leave these values out.
    GPUSample.objects.filter(ts=at(10, 20)).update(power_w=math.inf)
    GPUSample.objects.filter(ts=at(11, 30)).update(power_w=1.7e308)
    return gpus


def test_expiry_drops_only_the_partitions_wholly_past_retention(day_of_polls):
    before = GPUSample.objects.count()
    kept_early = GPUSample.objects.filter(ts__gte=at(12, 0), ts__lt=at(13, 0)).count()

    report = rollup_and_expire(NOW)

    assert report.cutoff == CUTOFF
    # 09:00, 10:00 and 11:00 end at or before the 12:00 cutoff; 12:00-13:00 is kept whole.
    assert report.partitions_dropped == 3
    assert names_between(at(0, 0), at(12, 0)) == []
    assert names_between(at(12, 0), at(14, 0)) == ["nodes_gpusample_p2026030112", "nodes_gpusample_p2026030113"]
    assert report.samples_rolled_up == 3 * 24 * 2  # 3 hours x 24 polls x 2 GPUs
    assert report.values_skipped == 2 * 2  # the inf and the 1.7e308 of both GPUs
    assert GPUSample.objects.count() == before - report.samples_rolled_up
    assert not GPUSample.objects.filter(ts__lt=at(12, 0)).exists()
    assert GPUSample.objects.filter(ts__gte=at(12, 0), ts__lt=at(13, 0)).count() == kept_early
    assert sum(GPUSampleRollup.objects.values_list("samples", flat=True)) == report.samples_rolled_up
    # A second run finds nothing more to do.
    assert rollup_and_expire(NOW).samples_rolled_up == 0


def test_charts_read_the_same_values_after_partitions_are_rolled_up_and_dropped(day_of_polls):
    node = day_of_polls[0].node
    start, end = at(9, 0), at(12, 0, day=2)
    before = node_series(node, start, end, now=NOW)

    rollup_and_expire(NOW)
    after = node_series(node, start, end, now=NOW)

    assert before.keys() == after.keys()
    for uuid, points in before.items():
        assert len(after[uuid]) == len(points) > 0
        for old, new in zip(points, after[uuid], strict=True):
            assert old.keys() == new.keys()
            for key, value in old.items():
                if isinstance(value, float):
                    assert new[key] == pytest.approx(value, rel=1e-12), (uuid, old["ts"], key)
                else:
                    assert new[key] == value, (uuid, old["ts"], key)
    # The buckets of the dropped hours left the implausible power readings out.
    assert all(p["power_w_max"] is None or p["power_w_max"] < 200 for points in after.values() for p in points)
