"""The beat's analysis: a proposed plan waits for an admin unless GPUPLANE_AUTO_CONSOLIDATE is on;
stale plans expire; both tasks are on the beat schedule at their settings' intervals."""
from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from consolidation.models import ConsolidationPlan
from consolidation.tasks import analyse_consolidation_task
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


SLOTS = itertools.count(time.time_ns())  # never a slot an earlier test (or run) claimed


@pytest.fixture(autouse=True)
def fresh_slots(monkeypatch):
    """Each run of the analysis in its own beat slot (two in one slot: the second does nothing)."""
    monkeypatch.setattr("consolidation.tasks.interval_slot", lambda interval_s: next(SLOTS))


def test_the_analysis_proposes_and_waits_for_an_admin_by_default():
    assert django_settings.AUTO_CONSOLIDATE is False
    mps_cluster(FakeClock(), node_count=3, deployments=2)
    done = analyse_consolidation_task()
    assert ConsolidationPlan.objects.get(pk=done["plan"]).status == "proposed"


def test_auto_consolidate_approves_and_stale_plans_expire(settings):
    mps_cluster(FakeClock(), node_count=3, deployments=2)
    first = analyse_consolidation_task()["plan"]
    ConsolidationPlan.objects.filter(pk=first).update(expires_at=timezone.now() - timedelta(seconds=1))
    settings.AUTO_CONSOLIDATE = True
    done = analyse_consolidation_task()
    assert done["expired"] == 1 and ConsolidationPlan.objects.get(pk=first).status == "expired"
    assert ConsolidationPlan.objects.get(pk=done["plan"]).status == "approved"


def test_nothing_to_do_stores_no_plan():
    mps_cluster(FakeClock(), node_count=2, deployments=1)
    assert analyse_consolidation_task()["plan"] is None
    assert not ConsolidationPlan.objects.exists()


def test_both_tasks_are_on_the_beat_schedule():
    schedule = django_settings.CELERY_BEAT_SCHEDULE
    assert schedule["analyse-consolidation"]["schedule"] == float(django_settings.CONSOLIDATION_INTERVAL_S) == 300.0
    assert schedule["execute-consolidations"]["task"] == "consolidation.tasks.execute_consolidations_task"
