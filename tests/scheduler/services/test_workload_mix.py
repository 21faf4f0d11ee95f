"""The observed workload mix: the packing plugins' typical pods and plan, refreshed by beat, read
by the deploy path from the cache only (scheduler/services/workload_mix.py)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler import tasks
from scheduler.choices import PlacementStatus
from scheduler.core.fragmentation_columns import observed_typical_pods
from scheduler.core.plugins.fragmentation_gradient import DEFAULT_TYPICAL_PODS
from scheduler.models import Deployment, Placement
from scheduler.services import deciding, feedback, workload_mix
from tests.nodes.factories import make_node


def test_typical_pods_need_enough_placements_and_cover_95_percent():
    assert observed_typical_pods([(4000, 500, 1, ())] * 19) is None
    shapes = [(4000, 500, 1, ())] * 20 + [(8000, 1000, 2, ())] * 10
    assert observed_typical_pods(shapes) == [
        {"share_milli": 500, "gpu_count": 1, "cpu_milli": 4000, "gpu_models": [], "weight": pytest.approx(2 / 3)},
        {"share_milli": 1000, "gpu_count": 2, "cpu_milli": 8000, "gpu_models": [], "weight": pytest.approx(1 / 3)},
    ]


def _place(shares: list[int], *, status: str = PlacementStatus.RUNNING, name: str = "w") -> Deployment:
    """Placement rows of one deployment, one per share (a share of 1000 x2 is a 2-GPU gang)."""
    node = make_node(name=f"{name}-node", gpu_count=8)
    deployment = Deployment.objects.create(name=name, model="m", memory_mib=1024, replicas=len(shares))
    Placement.objects.bulk_create(
        Placement(deployment=deployment, node=node, replica_index=i, status=status, share_milli=min(share, 1000),
                  gpu_indexes=[0, 1] if share == 2000 else [0], cpu_milli=4000)
        for i, share in enumerate(shares))
    return deployment


def _plugin_args(scheduler) -> tuple[set[tuple[int, int]], set[int]]:  # (share, GPU count) pairs, plan shares
    plugins = {plugin.NAME: plugin for plugin, _ in scheduler.profile.scores}
    table = plugins["FragmentationGradient"].table
    typical = {(int(m), int(c)) for m, c in zip(table.milli, table.count, strict=True)}
    return typical, set(plugins["SharingPlan"].plan.steps)


@pytest.mark.django_db
def test_refresh_stores_the_mix_of_live_and_recent_placements(settings):
    settings.GPUPLANE_SCHEDULER_PROFILE = "balanced"
    defaults = {(int(p["share_milli"]), int(p["gpu_count"])) for p in DEFAULT_TYPICAL_PODS}
    assert _plugin_args(deciding.placement_scheduler()) == (defaults, set())  # no mix yet: shipped defaults
    _place([650] * 12 + [320] * 12)
    _place([470] * 6, status=PlacementStatus.RELEASED, name="ended")  # released, but within the window
    assert tasks.refresh_workload_mix_task() == {"typical_pods": 3, "patterns": 2, "placements": 30}
    mix = workload_mix.current_workload_mix()
    assert mix is not None and mix.patterns == [[470, 470], [650, 320]]
    assert _plugin_args(deciding.placement_scheduler()) == ({(650, 1), (320, 1), (470, 1)}, {320, 470, 650})


@pytest.mark.django_db
def test_a_change_of_mix_reaches_deploys_within_one_refresh_interval(settings):
    """Beat runs the refresh every WORKLOAD_MIX_INTERVAL_S; the next deploy after a run decides
    with the new mix (its version keys the profile cache), so a new mix is in force within one
    interval of the change."""
    assert settings.CELERY_BEAT_SCHEDULE["refresh-workload-mix"] == {
        "task": "scheduler.tasks.refresh_workload_mix_task",
        "schedule": float(settings.WORKLOAD_MIX_INTERVAL_S),
        "options": {"expires": settings.WORKLOAD_MIX_INTERVAL_S * 0.9},
    }
    first = _place([500] * 30, name="halves")
    tasks.refresh_workload_mix_task()
    before = deciding.placement_scheduler()
    assert _plugin_args(before)[1] == {500}
    # The workload changes: the halves end, quarters and gangs arrive.
    first.placements.update(status=PlacementStatus.RELEASED,
                            created_at=timezone.now() - timedelta(seconds=settings.WORKLOAD_MIX_WINDOW_S + 60))
    _place([250] * 20 + [2000] * 10, name="new")
    assert deciding.placement_scheduler() is before  # until the next refresh, the last mix holds
    tasks.refresh_workload_mix_task()  # beat's next run, at most one interval later
    after = deciding.placement_scheduler()
    assert after is not before
    assert _plugin_args(after) == ({(250, 1), (1000, 2)}, {250})


@pytest.mark.django_db
def test_too_few_placements_clear_the_mix():
    _place([500] * 30)
    tasks.refresh_workload_mix_task()
    assert workload_mix.current_workload_mix() is not None
    Placement.objects.all().delete()
    assert tasks.refresh_workload_mix_task() == {"typical_pods": 0, "patterns": 0, "placements": 0}
    assert workload_mix.current_workload_mix() is None


@pytest.mark.django_db
def test_the_deploy_path_reads_the_mix_without_a_database_statement():
    _place([500] * 30)
    tasks.refresh_workload_mix_task()
    feedback.learned()  # the feedback's weights: read once, then kept in the cache until they change
    with CaptureQueriesContext(connection) as queries:
        scheduler = deciding.placement_scheduler()
    assert queries.captured_queries == [] and _plugin_args(scheduler)[1] == {500}


def test_a_profile_that_states_its_own_plugin_args_keeps_them():
    data = {"scores": {"FragmentationGradient": 1, "SharingPlan": 1},
            "plugin_args": {"SharingPlan": {"patterns": [[700, 300]]}}}
    mix = workload_mix.WorkloadMix(typical_pods=[{"share_milli": 500, "gpu_count": 1, "weight": 1}],
                                   patterns=[[500, 500]], placements=40, version=1)
    deciding._observed_workload(data, mix)
    assert data["plugin_args"] == {"SharingPlan": {"patterns": [[700, 300]]},
                                   "FragmentationGradient": {"typical_pods": mix.typical_pods}}
    assert settings.WORKLOAD_MIX_WINDOW_S > 0
