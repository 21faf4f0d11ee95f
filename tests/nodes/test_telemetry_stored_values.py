"""Rollups and chart series stay finite whatever the tables hold.

Ingest refuses implausible values now, but rows written before the bounds existed (a 1.7e308 W
sample once overflowed a rollup to inf and made the 7d/30d series answer 500) or straight into
the database still have to be read. Each test writes the bad value with SQL, into a column
without a check constraint (power and temperature: on PostgreSQL utilization has one), then
rolls up or reads.
"""
from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from nodes.models import GPU, GPUSample, GPUSampleRollup
from nodes.telemetry.rollup import rollup_and_expire
from nodes.telemetry.series import gpu_series
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 2, tzinfo=UTC)
BUCKET = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)  # rolled up at NOW (raw kept 24 h)
# NaN reads back as NULL on SQLite, as NaN on PostgreSQL; either way it must not reach a mean.
BAD_VALUES = [1.7e308, float("inf"), float("-inf"), float("nan"), -1.0, 1e12]


@pytest.fixture(autouse=True)
def retention(settings):
    settings.TELEMETRY_RAW_RETENTION_H = 24
    settings.TELEMETRY_ROLLUP_BUCKET_S = 300
    settings.TELEMETRY_ROLLUP_RETENTION_D = 30


@pytest.fixture
def gpu(db) -> GPU:
    return make_node("n1", gpu_count=1).gpus.get()


def write_by_sql(model: type, pk: int, **values: float) -> None:
    """UPDATE one row's columns with raw SQL, bypassing every check in Python."""
    meta = model._meta
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in values)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s", [*values.values(), pk]
        )


def raw(gpu: GPU, ts: datetime, power_w: float, temperature_c: float = 50.0) -> GPUSample:
    return GPUSample.objects.create(gpu=gpu, ts=ts, utilization_pct=50.0, power_w=power_w, temperature_c=temperature_c)


def finite_or_none(value: object) -> bool:
    return value is None or (isinstance(value, int | float) and math.isfinite(value))


@pytest.mark.parametrize("bad", BAD_VALUES, ids=repr)
def test_the_rollup_leaves_implausible_stored_values_out(gpu, bad):
    raw(gpu, BUCKET, power_w=100.0)
    # Two of them: 1.7e308 + 1.7e308 is what overflowed the sum to inf.
    for second in (30, 60):
        write_by_sql(GPUSample, raw(gpu, BUCKET + timedelta(seconds=second), power_w=1.0).pk, power_w=bad)

    report = rollup_and_expire(NOW)

    row = GPUSampleRollup.objects.get()
    assert row.samples == 3
    assert (row.power_w_avg, row.power_w_max) == (100.0, 100.0)
    assert (row.temperature_c_avg, row.utilization_pct_avg) == (50.0, 50.0)  # the rest of those samples counts
    if not (math.isnan(bad) and connection.vendor == "sqlite"):  # SQLite stores NaN as NULL: nothing to skip
        assert report.values_skipped == 2


def test_the_rollup_repairs_a_stored_bucket_it_merges_into(gpu):
    GPUSampleRollup.objects.create(gpu=gpu, bucket_start=BUCKET, samples=2, power_w_avg=1.0, power_w_max=1.0)
    write_by_sql(GPUSampleRollup, GPUSampleRollup.objects.get().pk, power_w_avg=float("inf"), power_w_max=1.7e308)
    raw(gpu, BUCKET + timedelta(minutes=1), power_w=300.0)  # a late sample for that bucket

    rollup_and_expire(NOW)

    row = GPUSampleRollup.objects.get()
    assert (row.samples, row.power_w_avg, row.power_w_max) == (3, 300.0, 300.0)


@pytest.mark.parametrize("bad", BAD_VALUES, ids=repr)
def test_series_read_implausible_stored_values_as_not_measured(gpu, bad):
    old = GPUSampleRollup.objects.create(gpu=gpu, bucket_start=BUCKET, samples=2, power_w_avg=1.0, power_w_max=1.0)
    write_by_sql(
        GPUSampleRollup, old.pk, power_w_avg=bad, power_w_max=bad, temperature_c_avg=bad, memory_used_mib_avg=bad
    )
    recent = raw(gpu, NOW - timedelta(minutes=1), power_w=1.0)
    write_by_sql(GPUSample, recent.pk, power_w=bad, temperature_c=bad)

    long_range = gpu_series(gpu, NOW - timedelta(days=7), NOW, now=NOW)
    short_range = gpu_series(gpu, NOW - timedelta(hours=1), NOW, now=NOW)

    assert [point["power_w"] for point in long_range] == [None, None]
    assert [point["memory_used_mib"] for point in long_range] == [None, None]
    assert [point["power_w"] for point in short_range] == [None]
    assert short_range[0]["utilization_pct"] == 50.0
    assert all(finite_or_none(value) for point in long_range + short_range for key, value in point.items() if key != "ts")


@pytest.mark.parametrize("range_", ["1h", "24h", "7d", "30d"])
@pytest.mark.parametrize("bad", [1.7e308, float("inf"), float("nan")], ids=repr)
def test_the_series_api_answers_200_with_nulls_for_implausible_stored_values(viewer_api, gpu, range_, bad):
    now = timezone.now()
    bucket = datetime.fromtimestamp((now - timedelta(days=3)).timestamp() // 300 * 300, tz=UTC)
    old = GPUSampleRollup.objects.create(gpu=gpu, bucket_start=bucket, samples=2, power_w_avg=1.0, power_w_max=1.0)
    write_by_sql(GPUSampleRollup, old.pk, power_w_avg=bad, power_w_max=bad, memory_used_mib_avg=bad)
    write_by_sql(GPUSample, raw(gpu, now - timedelta(minutes=5), power_w=1.0).pk, power_w=bad)
    raw(gpu, now - timedelta(minutes=4), power_w=1.7e308 if math.isfinite(bad) else 200.0)

    for url in (f"/api/v1/gpus/{gpu.uuid}/series/?range={range_}", f"/api/v1/nodes/n1/series/?range={range_}"):
        response = viewer_api.get(url)

        assert response.status_code == 200, response.content[:300]
        body = json.loads(response.content)  # strict: no NaN or Infinity
        points = body["points"] if "points" in body else body["gpus"][gpu.uuid]["points"]
        assert points, body
        assert all(point["power_w"] in (None, 200.0) for point in points), points
        assert all(finite_or_none(v) for point in points for k, v in point.items() if k != "ts")


@pytest.mark.parametrize("bad", [1.7e308, float("inf"), float("nan")], ids=repr)
def test_the_gpu_api_shows_implausible_latest_values_as_null(viewer_api, gpu, bad):
    write_by_sql(GPU, gpu.pk, power_w=bad, temperature_c=bad)

    for url in ("/api/v1/gpus/", f"/api/v1/gpus/{gpu.uuid}/"):
        response = viewer_api.get(url)

        assert response.status_code == 200, response.content[:300]
        body = json.loads(response.content)
        row = body["results"][0] if "results" in body else body
        assert (row["uuid"], row["power_w"], row["temperature_c"]) == (gpu.uuid, None, None)
