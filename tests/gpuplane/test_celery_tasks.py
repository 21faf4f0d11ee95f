"""Celery as its guide says (issue 18): the idempotent tasks acknowledge late and give their message
back when their worker dies; every task has soft and hard time limits; every beat entry expires
before its next run; Redis's visibility timeout outlasts the longest task."""
from __future__ import annotations

import pytest
from django.conf import settings

from gpuplane.celery import app

# The tasks whose whole body may run again after a run died part-way (their docstrings say why).
IDEMPOTENT = {
    "scheduler.tasks.watch_deployment_task",
    "scheduler.tasks.sweep_deployments_task",
    "nodes.tasks.sync_inventory_task",
    "nodes.tasks.rollup_telemetry_task",
    "rollouts.tasks.reconcile_rollouts_task",
    "consolidation.tasks.execute_consolidations_task",
    "scheduler.tasks.advance_moves_task",
}
# Claim their interval slot first: a delivery again could only skip, so they acknowledge early.
SLOT_CLAIMED = {
    "nodes.tasks.poll_metrics_task",
    "savings.tasks.record_savings_task",
    "consolidation.tasks.analyse_consolidation_task",
}


def project_tasks() -> dict[str, object]:
    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


def test_exactly_the_idempotent_tasks_acknowledge_late_and_come_back_when_their_worker_dies():
    tasks = project_tasks()
    assert IDEMPOTENT | SLOT_CLAIMED <= set(tasks)
    late = {name for name, task in tasks.items() if task.acks_late}
    assert late == IDEMPOTENT
    assert all(tasks[name].reject_on_worker_lost for name in IDEMPOTENT)


@pytest.mark.parametrize("name", sorted(project_tasks()))
def test_every_task_has_a_soft_limit_below_its_hard_limit_and_both_within_the_broker_s_patience(name):
    task = project_tasks()[name]
    soft = task.soft_time_limit or settings.CELERY_TASK_SOFT_TIME_LIMIT
    hard = task.time_limit or settings.CELERY_TASK_TIME_LIMIT
    assert 0 < soft < hard <= settings.CELERY_TASK_TIME_LIMIT
    # A message unacknowledged for visibility_timeout is handed to another worker: never while it runs.
    assert hard + settings.DEPLOYMENT_WATCH_INTERVAL_S < settings.CELERY_BROKER_VISIBILITY_TIMEOUT_S


def test_every_beat_entry_expires_before_its_next_run():
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert 0 < entry["options"]["expires"] < entry["schedule"], name
