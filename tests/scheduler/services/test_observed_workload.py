"""FragmentationGradient's typical pods come from the live placements once there are enough."""
from __future__ import annotations

import pytest

from scheduler.core.plugins.fragmentation_gradient import DEFAULT_TYPICAL_PODS, observed_typical_pods
from scheduler.services import deciding
from tests.scheduler.pages.deploying import deploy


def test_observed_typical_pods_need_enough_placements():
    assert observed_typical_pods([(500, 1)] * 19) is None
    shapes = [(500, 1)] * 20 + [(1000, 2)] * 10 + [(0, 0)] * 5  # unplaced shapes are not workload
    assert observed_typical_pods(shapes) == [
        {"share_milli": 500, "gpu_count": 1, "weight": pytest.approx(2 / 3)},
        {"share_milli": 1000, "gpu_count": 2, "weight": pytest.approx(1 / 3)},
    ]


def _typical(scheduler) -> set[tuple[int, int]]:
    plugin = next(p for p, _ in scheduler.profile.scores if p.NAME == "FragmentationGradient")
    return {(pod.share_milli, pod.gpu_count) for pod in plugin.pods}


@pytest.mark.django_db
def test_the_placement_scheduler_uses_the_live_workload(cluster, monkeypatch, settings):
    settings.GPUPLANE_SCHEDULER_PROFILE = "balanced"
    defaults = {(int(p["share_milli"]), int(p["gpu_count"])) for p in DEFAULT_TYPICAL_PODS}
    assert _typical(deciding.placement_scheduler()) == defaults  # nothing placed yet
    deploy(name="embedder", namespace="search", priority="low", workload_type="batch")  # 50 % MPS
    monkeypatch.setattr(deciding, "observed_typical_pods",
                        lambda shapes: observed_typical_pods(shapes, minimum=1))
    assert _typical(deciding.placement_scheduler()) == {(500, 1)}


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_live_workload_is_read_once_per_interval(monkeypatch, django_assert_num_queries):
    clock = [1000.0]
    monkeypatch.setattr(deciding, "_clock", lambda: clock[0])
    with django_assert_num_queries(1):
        deciding._observed_typical_pods()
    clock[0] += deciding.OBSERVED_WORKLOAD_TTL_S - 1
    with django_assert_num_queries(0):
        deciding._observed_typical_pods()
    clock[0] += 1
    with django_assert_num_queries(1):
        deciding._observed_typical_pods()
    deciding.forget_observed_workload()
    with django_assert_num_queries(1):
        deciding._observed_typical_pods()


@pytest.mark.django_db
def test_inside_a_transaction_it_is_read_every_time(django_assert_num_queries):
    with django_assert_num_queries(2):
        deciding._observed_typical_pods()
        deciding._observed_typical_pods()
