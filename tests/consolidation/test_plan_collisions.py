"""Issue 18, must-show 2 (plans): overlapping consolidation plans never both execute, and nothing leaks.

The reproduction: two analyses with the same move, both approved, then the executor's ticks. The
second analysis refreshes the first plan instead of storing a duplicate; a plan that overlaps an
approved one is refused at approval (409 with the reason); and if two overlapping plans were
approved anyway (approvals racing), the executor aborts the second untouched. After every
scenario each deployment has exactly its replicas active and every held partition belongs to one
of them.
"""
from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone
from rest_framework.test import APIClient

from consolidation.approval import NotAllowed, approve
from consolidation.models import ConsolidationPlan
from consolidation.tasks import analyse_consolidation_task
from lifecycle.models import AuditEvent
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, PartitionHold, Placement
from tests.consolidation.ticks import execute_tick
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

URL = "/api/v1/consolidations/"
ACTIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


@pytest.fixture
def spread():
    """Three one-GPU MPS nodes, two one-replica deployments on two of them: one node can be emptied."""
    clock = FakeClock()
    return clock, mps_cluster(clock, node_count=3, deployments=2)


@pytest.fixture
def admin(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def execute(clock: FakeClock, cluster, ticks: int = 30) -> None:
    """The executor's ticks, a second apart, until no plan is approved or executing."""
    for _ in range(ticks):
        execute_tick(cluster, clock)
        clock.advance(1)
        if not ConsolidationPlan.objects.filter(status__in=("approved", "executing")).exists():
            return
    raise AssertionError("plans still in flight")


def assert_nothing_leaked() -> None:
    """Active placements = replicas for every deployment; every held partition is held by one of them."""
    active = Counter(Placement.objects.filter(status__in=ACTIVE).values_list("deployment_id", flat=True))
    assert active == Counter({d.pk: d.replicas for d in Deployment.objects.exclude(status="deleted")})
    held_by = set(PartitionHold.objects.values_list("placement_id", flat=True))
    assert held_by == set(Placement.objects.filter(status__in=ACTIVE).values_list("pk", flat=True))


def test_posting_the_analysis_twice_refreshes_one_plan_and_it_executes_once(spread, admin):
    clock, cluster = spread
    first = admin.post(URL, format="json")
    second = admin.post(URL, format="json")

    assert first.status_code == 201 and second.status_code == 200
    assert second.json()["plan"]["id"] == first.json()["id"] and "refreshed" in second.json()["detail"]
    assert ConsolidationPlan.objects.count() == 1
    assert AuditEvent.objects.filter(verb="consolidationplan.refreshed").count() == 1
    plan_url = f"{URL}{first.json()['id']}/approve/"
    assert admin.post(plan_url, format="json").status_code == 200
    again = admin.post(plan_url, format="json")
    assert again.status_code == 409 and again.json()["status"] == "approved"

    execute(clock, cluster)

    assert ConsolidationPlan.objects.get().status == "executed"
    assert_nothing_leaked()


def test_a_plan_overlapping_an_approved_one_is_refused_and_if_approved_anyway_aborts_untouched(spread, admin):
    clock, cluster = spread
    first = ConsolidationPlan.objects.get(pk=admin.post(URL, format="json").json()["id"])
    # The same move in a second plan, as every analysis stored one before issue 18.
    second = ConsolidationPlan.objects.create(moves=first.moves, nodes_freed=first.nodes_freed,
                                              fingerprint=first.fingerprint, expires_at=first.expires_at)
    assert admin.post(f"{URL}{first.pk}/approve/", format="json").status_code == 200

    refused = admin.post(f"{URL}{second.pk}/approve/", format="json")

    assert refused.status_code == 409
    workload = first.moves[0]["workload"]
    assert refused.json() == {"status": "proposed", "detail": (
        f"Cannot approve plan {second.pk}: plan {first.pk} (approved) moves the same replica: {workload}. "
        "Wait until that plan is done, then run the analysis again.")}
    # Two approvals that raced past each other's check: the executor still runs only one.
    ConsolidationPlan.objects.filter(pk=second.pk).update(status="approved")
    held_before = set(PartitionHold.objects.values_list("partition_id", flat=True))

    execute_tick(cluster, clock)

    second.refresh_from_db()
    assert second.status == "aborted" and second.progress == {}
    assert second.reason.startswith(f"it collides with a plan being carried out (plan {first.pk} (executing) moves "
                                    f"the same replica: {workload}); nothing was evicted")
    assert not AuditEvent.objects.filter(object_id=str(second.pk), verb="consolidationplan.replacement_placed")
    execute(clock, cluster)
    first.refresh_from_db()
    assert first.status == "executed" and first.progress["moves"]["0"]["state"] == "done"
    assert held_before != set(PartitionHold.objects.values_list("partition_id", flat=True))  # the move happened
    assert_nothing_leaked()


def test_a_newer_analysis_supersedes_an_older_proposed_plan_for_the_same_replica(spread, admin):
    made = ConsolidationPlan.objects.get(pk=admin.post(URL, format="json").json()["id"])
    # An older plan moving the same replica elsewhere (the cluster changed since it was made).
    stale_moves = [{**made.moves[0], "to_node": "gpu-elsewhere"}]
    stale = ConsolidationPlan.objects.create(moves=stale_moves, fingerprint={"gpu-elsewhere": {}},
                                             expires_at=made.expires_at)
    made.delete()

    newer = admin.post(URL, format="json")

    assert newer.status_code == 201
    stale.refresh_from_db()
    assert stale.status == "superseded" and stale.finished_at is not None
    assert stale.reason.startswith(f"superseded by plan {newer.json()['id']}, made on a newer view of the cluster "
                                   "(it moves the same replica: ")
    assert admin.post(f"{URL}{stale.pk}/approve/", format="json").status_code == 409
    assert admin.get(f"{URL}?status=superseded").json()["count"] == 1


def test_the_analysis_leaves_the_nodes_of_an_approved_plan_alone(spread, admin):
    plan = admin.post(URL, format="json").json()
    assert admin.post(f"{URL}{plan['id']}/approve/", format="json").status_code == 200

    again = admin.post(URL, format="json")

    assert again.status_code == 200 and again.json()["plan"] is None
    assert ConsolidationPlan.objects.count() == 1


def test_two_beats_in_one_slot_make_one_analysis(spread, monkeypatch):
    monkeypatch.setattr("consolidation.tasks.interval_slot", lambda interval_s: -18)  # both in one slot

    done = analyse_consolidation_task()
    twice = analyse_consolidation_task()

    assert done["created"] is True and done["plan"] is not None
    assert twice == {"skipped": True, "reason": "slot already analysed", "slot": -18}
    assert ConsolidationPlan.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_approvals_of_overlapping_plans_approve_exactly_one(admin_user):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: the approvals take turns on its advisory lock")
    move = {"workload": "default/svc replica 0", "placement": 1, "deployment": 1, "from_node": "gpu-1",
            "from_gpus": [0], "to_node": "gpu-2", "to_gpus": [0], "mig_profile": "", "why": "frees gpu-1"}
    expires = timezone.now() + timedelta(minutes=5)
    plans = [ConsolidationPlan.objects.create(moves=[move], fingerprint={"gpu-1": {}, "gpu-2": {}}, expires_at=expires)
             for _ in range(2)]
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(plan: ConsolidationPlan) -> None:
        try:
            barrier.wait()
            try:
                approve(ConsolidationPlan.objects.get(pk=plan.pk), actor=admin_user)
                outcome = "approved"
            except NotAllowed as refused:
                outcome = refused.detail
            with lock:
                outcomes.append(outcome)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=worker, args=(plans[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count("approved") == 1
    assert sorted(ConsolidationPlan.objects.values_list("status", flat=True)) == ["approved", "proposed"]
