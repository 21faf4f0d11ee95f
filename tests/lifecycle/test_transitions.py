"""transition(): a conditional update that moves a row between states once, with an audit event."""
from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection

from lifecycle.models import AuditEvent
from lifecycle.transitions import transition
from scheduler.models import Deployment


def _deployment(status: str = "pending") -> Deployment:
    return Deployment.objects.create(name="web", model="m", memory_mib=1024, status=status)


@pytest.mark.django_db
def test_it_moves_a_row_in_an_expected_state_and_records_it():
    deployment = _deployment("placed")

    assert transition(Deployment, deployment.pk, ["pending", "placed"], "running", actor="system:test",
                      reason="ready", values={"message": "running"})

    deployment.refresh_from_db()
    assert (deployment.status, deployment.message) == ("running", "running")
    event = AuditEvent.objects.get()
    assert (event.verb, event.actor, event.reason) == ("deployment.running", "system:test", "ready")
    assert (event.before, event.after) == ({"status": "placed"}, {"status": "running"})
    assert (event.object_type, event.object_id) == ("scheduler.deployment", str(deployment.pk))


@pytest.mark.django_db
def test_it_leaves_a_row_in_another_state_alone_and_records_nothing():
    deployment = _deployment("deleted")
    updated_at = deployment.updated_at

    assert not transition(Deployment, deployment.pk, "pending", "running")

    deployment.refresh_from_db()
    assert deployment.status == "deleted"
    assert deployment.updated_at == updated_at
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_a_missing_row_is_no_transition():
    assert not transition(Deployment, 123456, "pending", "running")


@pytest.mark.django_db
def test_it_takes_a_custom_verb_and_sets_updated_at():
    deployment = _deployment("pending")
    before = deployment.updated_at

    assert transition(Deployment, deployment.pk, "pending", "failed", verb="deployment.failed-on-timeout")

    deployment.refresh_from_db()
    assert deployment.updated_at > before
    assert AuditEvent.objects.get().verb == "deployment.failed-on-timeout"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_of_racing_workers_exactly_one_wins():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serialises all writers, so there is no race to test")
    deployment = _deployment("pending")
    barrier = threading.Barrier(8)
    wins: list[bool] = []
    lock = threading.Lock()

    def worker(target: str) -> None:
        try:
            barrier.wait()
            won = transition(Deployment, deployment.pk, "pending", target)
            with lock:
                wins.append(won)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=worker, args=("running" if i % 2 else "failed",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(wins) == [False] * 7 + [True]
    assert AuditEvent.objects.filter(object_id=str(deployment.pk)).count() == 1
