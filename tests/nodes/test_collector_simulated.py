"""SimulatedCollector: deterministic, smooth, and driven by what runs on each GPU."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodes.catalog import CATALOG
from nodes.collectors.base import MIGInstanceReading
from nodes.collectors.simulated import SimulatedCollector
from nodes.models import GPU
from tests.nodes.factories import make_node, make_partition

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
H100_TDP_W = CATALOG["H100-SXM5-80GB"].tdp_w  # 700


def at(when: datetime, seed: int = 42) -> dict[str, object]:
    readings = SimulatedCollector(seed=seed, clock=lambda: when).collect()
    return {reading.gpu_uuid: reading for reading in readings}


def occupy(gpu: GPU, pod: str, *, share_milli: int = 1000, memory_mib: int | None = None, slot: int = 0) -> None:
    """Put `pod` on `gpu` (one partition) and account for it on the GPU row, as inventory sync does."""
    memory = gpu.memory_mib if memory_mib is None else memory_mib
    partition = gpu.partitions.filter(slot=slot).first()
    if partition is None:
        make_partition(gpu, kind="mps", slot=slot, share_milli=share_milli, memory_mib=memory, pod=pod)
    else:
        partition.pod = pod
        partition.share_milli = share_milli
        partition.memory_mib = memory
        partition.save()
    gpu.allocated_milli += share_milli
    gpu.allocated_memory_mib += memory
    gpu.save()


@pytest.fixture
def fleet() -> dict[str, GPU]:
    """h100-node-1: GPU 0 runs a training job, GPU 1 idles, GPU 2 serves from half the GPU."""
    node = make_node("h100-node-1", gpu_count=3, gpu_memory_mib=81559)
    gpus = {gpu.index: gpu for gpu in node.gpus.all()}
    occupy(gpus[0], "training/llama3-70b-finetune-0")
    gpus[2].partitions.all().delete()
    occupy(gpus[2], "serving/mistral-7b-0", share_milli=500, memory_mib=40779)
    return {"training": gpus[0], "idle": gpus[1], "serving": gpus[2]}


def test_same_seed_and_time_give_the_same_readings_and_another_seed_others(fleet):
    first = at(T0)
    assert at(T0) == first
    # Within the same second the readings do not change either (they are stamped in whole seconds).
    assert at(T0 + timedelta(microseconds=700_000)) == first

    other_seed = at(T0, seed=7)
    assert [other_seed[uuid].utilization_pct for uuid in first] != [first[uuid].utilization_pct for uuid in first]


def test_an_idle_gpu_idles(fleet):
    for minute in range(0, 60, 7):
        reading = at(T0 + timedelta(minutes=minute))[fleet["idle"].uuid]
        assert 0 <= reading.utilization_pct <= 3
        assert reading.memory_used_mib <= 4
        # Idle draw: 15-20 % of the H100's 700 W TDP (small noise around it).
        assert 0.14 * H100_TDP_W <= reading.power_w <= 0.21 * H100_TDP_W
        assert reading.temperature_c < 45


def test_load_follows_what_runs_on_the_gpu(fleet):
    readings = at(T0)
    training, idle, serving = (readings[fleet[name].uuid] for name in ("training", "idle", "serving"))

    assert training.utilization_pct >= 70  # a whole GPU of training: 0.82-0.97 load
    # Half the GPU, serving at 0.35-0.75 load (+/- 12 % drift, +/- 2 points noise).
    assert 13 <= serving.utilization_pct <= 45
    assert training.utilization_pct > serving.utilization_pct > idle.utilization_pct

    # Memory: the allowance times how full the workload keeps it (training 85-95 %), plus a context.
    assert 0.85 * 81559 <= training.memory_used_mib <= 81559
    assert 0.80 * 40779 <= serving.memory_used_mib <= 0.92 * 40779 + 300
    assert training.memory_total_mib == 81559

    # Power between idle and TDP according to utilization; temperature follows power.
    assert training.power_w > serving.power_w > idle.power_w
    assert training.power_w <= H100_TDP_W and training.power_limit_w == H100_TDP_W
    assert training.temperature_c > serving.temperature_c > idle.temperature_c
    assert training.missing == frozenset({"sm_clock_mhz", "memory_reserved_mib", "processes"})  # not simulated


def test_readings_walk_smoothly_over_time(fleet):
    uuid = fleet["serving"].uuid
    series = [at(T0 + timedelta(seconds=30 * step))[uuid] for step in range(120)]  # one hour every 30 s
    utilization = [reading.utilization_pct for reading in series]

    steps = [abs(b - a) for a, b in zip(utilization, utilization[1:])]
    assert max(steps) < 5  # no jumps between consecutive polls
    assert max(utilization) - min(utilization) > 2  # but it does move: charts are not flat lines
    assert len({reading.ts for reading in series}) == 120


def test_not_ready_nodes_report_nothing_and_an_unknown_model_uses_a_default_tdp(fleet):
    make_node("down-node", gpu_count=1, ready=False)
    make_node("mystery-node", gpu_model="", gpu_count=1)

    readings = at(T0)

    assert "GPU-down-node-0" not in readings
    mystery = readings["GPU-mystery-node-0"]
    assert mystery.power_limit_w == 300.0
    assert 0.14 * 300 <= mystery.power_w <= 0.21 * 300


def test_mig_instances_come_from_the_gpus_mig_partitions():
    node = make_node("a100-node-5", gpu_model="A100-SXM4-40GB", gpu_count=1, sharing_mode="mig",
                     gpu_memory_mib=40960, partitions=False)
    gpu = node.gpus.get()
    gpu.mig_enabled = True
    gpu.save()
    make_partition(gpu, kind="mig", slot=0, share_milli=428, memory_mib=20480, mig_profile="3g.20gb",
                   mig_start=0, mig_size=4, mig_device_uuid="MIG-a", pod="batch/resnet50-train-0")
    make_partition(gpu, kind="mig", slot=1, share_milli=428, memory_mib=20480, mig_profile="3g.20gb",
                   mig_start=4, mig_size=4, mig_device_uuid="MIG-b")
    gpu.allocated_milli, gpu.allocated_memory_mib = 428, 20480
    gpu.save()

    reading = at(T0)[gpu.uuid]

    assert reading.mig_enabled is True
    assert reading.mig_instances == (
        MIGInstanceReading("3g.20gb", 0, 4, 20480, "MIG-a"),
        MIGInstanceReading("3g.20gb", 4, 4, 20480, "MIG-b"),
    )
    # One 3g of 7 compute slices busy with training: about 43 % x 0.82-0.97.
    assert 30 <= reading.utilization_pct <= 48


def test_it_reads_the_inventory_in_a_constant_number_of_queries(fleet, django_assert_num_queries):
    make_node("a100-node-6", gpu_model="A100-SXM4-40GB", gpu_count=8)

    with django_assert_num_queries(2):
        readings = SimulatedCollector(seed=1, clock=lambda: T0).collect()

    assert len(readings) == 11
