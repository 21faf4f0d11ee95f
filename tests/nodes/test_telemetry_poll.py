"""nodes.telemetry.poll.store_poll and poll_metrics_task at fleet scale: every GPU stored, shard by shard."""
from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.core.cache import cache
from django.db import OperationalError
from django.utils import timezone

from nodes import tasks
from nodes.collectors.base import GPUReading
from nodes.collectors.simulated import SimulatedCollector
from nodes.models import GPU, GPUSample, GPUSampleRollup, Node
from nodes.tasks import POLL_LOCK_KEY, poll_metrics_task
from nodes.telemetry import poll
from nodes.telemetry.poll import shard_readings, store_poll
from nodes.telemetry.readings import store_readings
from nodes.telemetry.rollup import rollup_and_expire

pytestmark = pytest.mark.django_db

GPUS_PER_NODE = 8


@pytest.fixture(autouse=True)
def private_cache_keys(settings):
    """A key prefix of our own and an hour-long slot, as in test_poll_metrics."""
    settings.CACHES = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}
    settings.TELEMETRY_POLL_INTERVAL_S = 3600
    settings.GPUPLANE_TELEMETRY_SOURCE = "simulated"
    yield
    cache.delete_many([tasks.POLL_SLOT_KEY.format(slot=int(time.time() // 3600)), POLL_LOCK_KEY])


def make_fleet(nodes: int) -> list[GPU]:
    """`nodes` ready nodes of 8 H100s each, in bulk (no partitions: the simulator then reads them idle)."""
    created = Node.objects.bulk_create(
        Node(name=f"fleet-{n:04d}", gpu_model="H100-SXM5-80GB", gpu_count=GPUS_PER_NODE) for n in range(nodes)
    )
    return GPU.objects.bulk_create(
        GPU(node=node, index=i, uuid=f"GPU-{node.name}-{i}", model="H100-SXM5-80GB", memory_mib=81920)
        for node in created
        for i in range(GPUS_PER_NODE)
    )


def reading(gpu_uuid: str, ts: datetime, utilization_pct: float = 10.0) -> GPUReading:
    return GPUReading(gpu_uuid=gpu_uuid, index=0, ts=ts, utilization_pct=utilization_pct, memory_used_mib=100,
                      memory_total_mib=81920, power_w=120.0, power_limit_w=700.0, temperature_c=40.0,
                      sm_clock_mhz=1980, mig_enabled=False)


def fail_for(monkeypatch, node_name: str, times: int) -> list[int]:
    """Make store_readings raise OperationalError `times` times for a shard holding `node_name`'s GPUs."""
    failures: list[int] = []

    def flaky(shard: list[GPUReading], **kwargs: Any):
        if any(r.gpu_uuid.startswith(f"GPU-{node_name}-") for r in shard) and len(failures) < times:
            failures.append(len(shard))
            raise OperationalError("database is locked")
        return store_readings(shard, **kwargs)

    monkeypatch.setattr(poll, "store_readings", flaky)
    return failures


def test_a_poll_of_a_fleet_larger_than_the_api_limit_stores_every_gpu(monkeypatch, settings):
    # Scaled down: 10 nodes x 8 GPUs against a limit of 20 is the 5,000-GPU wall at 625 nodes.
    settings.TELEMETRY_MAX_BATCH = 20
    settings.TELEMETRY_POLL_SHARD_NODES = 2
    gpus = make_fleet(10)
    when = timezone.now().replace(microsecond=0) - timedelta(seconds=5)
    monkeypatch.setattr(tasks, "get_collector", lambda: SimulatedCollector(seed=1, clock=lambda: when))

    result = poll_metrics_task.apply().get()

    assert (result["readings"], result["stored"], result["shards"]) == (80, 80, 5)
    assert (result["failed_shards"], result["lost"], result["rejected"]) == (0, 0, 0)
    assert set(GPUSample.objects.values_list("gpu_id", "ts")) == {(gpu.pk, when) for gpu in gpus}
    assert not GPU.objects.exclude(sampled_at=when).exists()


def test_a_failing_shard_loses_only_its_own_nodes(monkeypatch, settings, caplog):
    settings.TELEMETRY_POLL_SHARD_NODES = 1
    make_fleet(3)
    when = timezone.now().replace(microsecond=0)
    failures = fail_for(monkeypatch, "fleet-0001", times=2)
    monkeypatch.setattr(tasks, "get_collector", lambda: SimulatedCollector(seed=1, clock=lambda: when))

    with caplog.at_level(logging.ERROR):
        result = poll_metrics_task.apply().get()

    assert failures == [8, 8]  # tried, retried once, given up
    assert (result["stored"], result["shards"], result["failed_shards"], result["lost"]) == (16, 3, 1, 8)
    stored_nodes = set(GPUSample.objects.values_list("gpu__node__name", flat=True))
    assert stored_nodes == {"fleet-0000", "fleet-0002"}
    assert "1 shard(s) not stored" in caplog.text


def test_a_shard_that_fails_once_is_stored_by_its_retry():
    make_fleet(2)
    now = timezone.now().replace(microsecond=0)
    readings = [reading(gpu.uuid, now) for gpu in GPU.objects.all()]

    with pytest.MonkeyPatch.context() as patch:
        failures = fail_for(patch, "fleet-0000", times=1)
        report = store_poll(readings, source="dcgm", shard_nodes=1, now=now)

    assert failures == [8]
    assert (report.stored, report.failed_shards, report.lost) == (16, 0, 0)


@pytest.mark.django_db(transaction=True)  # the foreign key is checked when the shard commits
def test_a_gpu_deleted_while_its_shard_is_written_costs_only_that_gpu(monkeypatch):
    make_fleet(2)
    now = timezone.now().replace(microsecond=0)
    readings = [reading(gpu.uuid, now) for gpu in GPU.objects.all()]
    real_resolve = poll.resolve_gpus

    def resolve_then_delete(uuids):
        resolved = real_resolve(uuids)
        GPU.objects.filter(uuid="GPU-fleet-0001-3").delete()  # inventory sync, between read and write
        return resolved

    monkeypatch.setattr(poll, "resolve_gpus", resolve_then_delete)
    report = store_poll(readings, source="dcgm", shard_nodes=1, now=now)

    assert (report.stored, report.unknown_gpus, report.failed_shards) == (15, 1, 0)


def test_the_soft_time_limit_is_not_taken_for_a_failing_shard(monkeypatch):
    make_fleet(2)
    now = timezone.now().replace(microsecond=0)

    def out_of_time(shard, **kwargs):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(poll, "store_readings", out_of_time)
    with pytest.raises(SoftTimeLimitExceeded):
        store_poll([reading(gpu.uuid, now) for gpu in GPU.objects.all()], source="dcgm", shard_nodes=1, now=now)


def test_shards_hold_whole_nodes_in_node_order_and_unknown_gpus_apart():
    now = timezone.now()
    readings = [reading(u, now) for u in ("a0", "b0", "x", "a1", "c0", "b1")]
    node_of = {"a0": 1, "a1": 1, "b0": 2, "b1": 2, "c0": 3}

    shards = shard_readings(readings, node_of, shard_nodes=2)

    assert [[r.gpu_uuid for r in shard] for shard in shards] == [["x"], ["a0", "a1", "b0", "b1"], ["c0"]]
    with pytest.raises(ValueError, match="at least 1"):
        shard_readings(readings, node_of, shard_nodes=0)


def test_rollups_of_a_sharded_poll_equal_those_of_one_batch(settings):
    make_fleet(3)
    now = timezone.now().replace(microsecond=0)
    expired = now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H + 1)
    start = expired.replace(minute=0, second=0)
    uuids = sorted(GPU.objects.values_list("uuid", flat=True))
    readings = [
        reading(u, start + timedelta(seconds=30 * k), utilization_pct=float((n * 7 + k * 13) % 100))
        for k in range(12)
        for n, u in enumerate(uuids)
    ]

    def rollups() -> list[tuple[Any, ...]]:
        return list(GPUSampleRollup.objects.order_by("gpu__uuid", "bucket_start").values_list(
            "gpu__uuid", "bucket_start", "samples", "utilization_pct_avg", "utilization_pct_max", "power_w_avg"))

    one_batch = store_readings(readings, source="dcgm", now=now)
    rollup_and_expire(now=now)
    expected = rollups()
    GPUSampleRollup.objects.all().delete()

    sharded = store_poll(readings, source="dcgm", shard_nodes=1, now=now)
    rollup_and_expire(now=now)

    assert one_batch.stored == sharded.stored == 12 * 24
    assert sharded.shards == 3
    assert rollups() == expected and len(expected) >= 24
