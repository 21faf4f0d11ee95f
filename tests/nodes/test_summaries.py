"""Idle detection (seed 004), per-node summaries and find_best_node_for_deployment, as tables.

GPUs here are 80 GiB parts: memory_mib = 81920, so the default 50 % memory threshold is
40960 MiB used.
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from nodes.models import GPU
from nodes.summaries import (
    NodeSummary,
    allocated_filter,
    find_best_node_for_deployment,
    idle_filter,
    is_allocated,
    is_idle,
    node_summaries,
)
from tests.nodes.factories import make_node

MIB_80G = 81920


def gpu(utilization_pct=None, memory_used_mib=None, allocated_milli=0, allocated_memory_mib=0, memory_mib=MIB_80G) -> GPU:
    """An unsaved GPU: is_idle reads attributes only."""
    return GPU(
        index=0, uuid="GPU-x", memory_mib=memory_mib, utilization_pct=utilization_pct, memory_used_mib=memory_used_mib,
        allocated_milli=allocated_milli, allocated_memory_mib=allocated_memory_mib,
    )


IDLE_CASES = [
        # util 10 < 30 and 8192 MiB = 10 % < 50 %
        (gpu(10.0, 8192), (), True),
        # util 30 is not < 30
        (gpu(30.0, 0), (), False),
        (gpu(29.9, 0), (), True),
        # 40960 / 81920 = 50 % is not < 50 %
        (gpu(0.0, 40960), (), False),
        # 40959 / 81920 = 49.998 % < 50 %
        (gpu(0.0, 40959), (), True),
        # Quiet but allocated: idle is what the GPU does, not what is handed out.
        (gpu(5.0, 1000, allocated_milli=1000, allocated_memory_mib=MIB_80G), (), True),
        # No telemetry: idle exactly when nothing is allocated.
        (gpu(), (), True),
        (gpu(allocated_milli=250), (), False),
        (gpu(allocated_memory_mib=1024), (), False),
        # Only one figure reported: the missing one does not count against idleness.
        (gpu(utilization_pct=12.0), (), True),
        (gpu(memory_used_mib=60000), (), False),  # 60000 / 81920 = 73 %
        # Thresholds are parameters: util 40 < 50, and 60000 / 81920 = 73 % < 80 %.
        (gpu(40.0, 60000), (50, 80), True),
        (gpu(40.0, 60000), (30, 80), False),
        # A GPU of unknown size (0 MiB) is judged by utilization alone.
        (gpu(10.0, 500, memory_mib=0), (), True),
        # At the memory threshold's edge by one MiB of an odd size: 50 % of 81919 is 40959.5.
        (gpu(0.0, 40959, memory_mib=81919), (), True),
        (gpu(0.0, 40960, memory_mib=81919), (), False),
]


@pytest.mark.parametrize(("sample", "thresholds", "idle"), IDLE_CASES)
def test_is_idle_follows_the_seed_004_rule(sample, thresholds, idle):
    assert is_idle(sample, *thresholds) is idle


@pytest.mark.django_db
@pytest.mark.parametrize(("sample", "thresholds", "idle"), IDLE_CASES)
def test_the_sql_filters_count_what_is_idle_and_is_allocated_count(sample, thresholds, idle):
    node = make_node("n1", gpu_count=0)
    sample.node = node
    sample.save()

    assert GPU.objects.filter(idle_filter(*thresholds)).exists() is idle
    assert GPU.objects.filter(allocated_filter()).exists() is is_allocated(sample)


def test_is_idle_reads_its_default_thresholds_from_settings(settings):
    settings.IDLE_UTILIZATION_PCT = 50
    settings.IDLE_MEMORY_PCT = 80

    assert is_idle(gpu(40.0, 60000)) is True  # 40 < 50, 73 % < 80 %
    settings.IDLE_UTILIZATION_PCT = 40
    assert is_idle(gpu(40.0, 60000)) is False  # 40 is not < 40


def set_telemetry(uuid: str, utilization_pct: float | None, memory_used_mib: int | None, age_s: int = 10, **fields) -> None:
    now = timezone.now()
    GPU.objects.filter(uuid=uuid).update(
        utilization_pct=utilization_pct, memory_used_mib=memory_used_mib,
        sampled_at=now - timedelta(seconds=age_s) if utilization_pct is not None or memory_used_mib is not None else None,
        **fields,
    )


@pytest.mark.django_db
def test_node_summaries_count_allocatable_and_idle_gpus_and_average_telemetry(django_assert_num_queries):
    make_node("a", gpu_count=4)
    set_telemetry("GPU-a-0", 10.0, 8192, age_s=5)  # idle; 10 % memory
    set_telemetry("GPU-a-1", 90.0, 61440, age_s=95, allocated_milli=1000, allocated_memory_mib=MIB_80G)  # busy; 75 %
    set_telemetry("GPU-a-2", 20.0, 45056, age_s=35)  # 55 % memory: not idle
    # GPU-a-3: no telemetry, nothing allocated: idle and allocatable.
    make_node("b-cordoned", gpu_count=2, cordoned=True)
    make_node("c-empty", gpu_count=0)

    with django_assert_num_queries(2):
        summaries = {s.name: s for s in node_summaries()}

    a = summaries["a"]
    assert (a.gpus, a.allocatable_gpus, a.idle_gpus, a.reporting_gpus) == (4, 3, 2, 3)
    # (10 + 90 + 20) / 3 = 40
    assert a.mean_utilization_pct == pytest.approx(40.0)
    # (10 + 75 + 55) / 3 = 46.67
    assert a.mean_memory_used_pct == pytest.approx((10 + 75 + 55) / 3)
    assert (a.newest_sampled_at - a.oldest_sampled_at).total_seconds() == pytest.approx(90, abs=1)
    assert a.schedulable and a.has_telemetry

    # Cordoned: nothing is allocatable, but its two quiet GPUs are still idle.
    b = summaries["b-cordoned"]
    assert (b.allocatable_gpus, b.idle_gpus, b.reporting_gpus, b.mean_utilization_pct) == (0, 2, 0, None)
    assert b.oldest_sampled_at is None and not b.has_telemetry

    c = summaries["c-empty"]
    assert (c.gpus, c.allocatable_gpus, c.idle_gpus) == (0, 0, 0)
    assert list(summaries) == ["a", "b-cordoned", "c-empty"]


@pytest.mark.django_db
def test_node_summaries_use_the_thresholds_given():
    make_node("a", gpu_count=2)
    set_telemetry("GPU-a-0", 40.0, 1000)
    set_telemetry("GPU-a-1", 60.0, 1000)

    assert node_summaries(utilization_threshold=30)[0].idle_gpus == 0
    assert node_summaries(utilization_threshold=50)[0].idle_gpus == 1  # 40 < 50
    assert node_summaries(utilization_threshold=61)[0].idle_gpus == 2


# --- find_best_node_for_deployment ----------------------------------------------------------


def cluster(spec: dict[str, dict]) -> None:
    """Nodes from a compact table: {name: {"gpus": [(util, memory_used_mib) | None | "alloc"], **node fields}}.

    None = no telemetry and free; "alloc" = no telemetry, whole GPU allocated.
    """
    for name, fields in spec.items():
        fields = dict(fields)
        readings = fields.pop("gpus")
        make_node(name, gpu_count=len(readings), **fields)
        for index, reading in enumerate(readings):
            uuid = f"GPU-{name}-{index}"
            if reading == "alloc":
                GPU.objects.filter(uuid=uuid).update(allocated_milli=1000, allocated_memory_mib=MIB_80G)
            elif reading is not None:
                set_telemetry(uuid, *reading)


QUIET = (5.0, 1024)  # 5 %, 1.25 % memory: idle
BUSY = (95.0, 70000)  # not idle


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("spec", "required", "best"),
    [
        # Most idle GPUs wins: a has 1 idle, b has 3 idle.
        ({"a": {"gpus": [QUIET, BUSY, BUSY]}, "b": {"gpus": [QUIET, QUIET, QUIET]}}, 1, "b"),
        # Needs 2: a has 1 idle GPU, b has 2: only b qualifies.
        ({"a": {"gpus": [QUIET, BUSY]}, "b": {"gpus": [QUIET, QUIET, BUSY]}}, 2, "b"),
        # Needs 3: nobody has 3 idle.
        ({"a": {"gpus": [QUIET, BUSY]}, "b": {"gpus": [QUIET, QUIET, BUSY]}}, 3, None),
        # Tie on 2 idle: mean utilization a = (5 + 5 + 95) / 3 = 35, b = (20 + 25) / 2 = 22.5 -> b.
        ({"a": {"gpus": [QUIET, QUIET, BUSY]}, "b": {"gpus": [(20.0, 0), (25.0, 0)]}}, 2, "b"),
        # Tie on idle GPUs and utilization: by name.
        ({"n2": {"gpus": [QUIET]}, "n1": {"gpus": [QUIET]}}, 1, "n1"),
        # A node without metrics offers its allocatable GPUs: 2 free of 3 -> 2 idle, counted as 0 % util,
        # beating a's 2 idle at (5 + 5 + 95) / 3 = 35 %.
        ({"a": {"gpus": [QUIET, QUIET, BUSY]}, "dark": {"gpus": [None, None, "alloc"]}}, 2, "dark"),
        # ... but its allocated GPU is not idle: it cannot take 3.
        ({"dark": {"gpus": [None, None, "alloc"]}}, 3, None),
        # Only ready, uncordoned nodes: the idle ones here are cordoned or NotReady.
        (
            {
                "a": {"gpus": [BUSY, QUIET]},
                "cordoned": {"gpus": [QUIET, QUIET], "cordoned": True},
                "down": {"gpus": [QUIET, QUIET, QUIET], "ready": False},
            },
            1,
            "a",
        ),
        (
            {"cordoned": {"gpus": [QUIET, QUIET], "cordoned": True}, "down": {"gpus": [QUIET], "ready": False}},
            1,
            None,
        ),
    ],
)
def test_find_best_node_for_deployment(spec, required, best):
    cluster(spec)

    found = find_best_node_for_deployment(required)

    assert (found.name if found else None) == best
    if found:
        assert isinstance(found, NodeSummary) and found.idle_gpus >= required


@pytest.mark.django_db
def test_find_best_node_honours_the_thresholds_given():
    # a: util 40 and 45 (mean 42.5), b: util 60 and 10 (mean 35).
    cluster({"a": {"gpus": [(40.0, 0), (45.0, 0)]}, "b": {"gpus": [(60.0, 0), (10.0, 0)]}})

    assert find_best_node_for_deployment(2) is None  # nobody has 2 GPUs below 30 %
    assert find_best_node_for_deployment(1).name == "b"  # only b's 10 % GPU is idle at 30 %
    # At 50 %: a has 2 idle (40, 45), b has 1 (10).
    assert find_best_node_for_deployment(2, utilization_threshold=50).name == "a"
    # Memory threshold: 0 MiB used is not < 0 %.
    assert find_best_node_for_deployment(1, utilization_threshold=100, memory_threshold=0) is None


@pytest.mark.django_db
def test_find_best_node_refuses_a_request_for_no_gpus():
    with pytest.raises(ValueError, match="at least 1"):
        find_best_node_for_deployment(0)
