"""record / record_many / events_for: what an audit event stores and how it is read back."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lifecycle.audit import AuditEntry, actor_name, events_for, record, record_many
from lifecycle.models import AuditEvent
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


def test_it_records_who_what_which_object_and_why(operator):
    node = make_node("n1", gpu_count=1)

    event = record("node.cordoned", node, actor=operator, reason="maintenance", before={"cordoned": False},
                   after={"cordoned": True})

    stored = AuditEvent.objects.get(pk=event.pk)
    assert (stored.actor, stored.verb, stored.object_type, stored.object_id) == (
        operator.username, "node.cordoned", "nodes.node", str(node.pk))
    assert stored.object_repr == "n1"
    assert stored.reason == "maintenance"
    assert (stored.before, stored.after) == ({"cordoned": False}, {"cordoned": True})


def test_it_names_actors():
    assert actor_name(None) == "system"
    assert actor_name("system:inventory-sync") == "system:inventory-sync"

    class Anonymous:
        is_authenticated = False

    assert actor_name(Anonymous()) == "anonymous"


def test_it_records_objects_that_are_gone_by_type_and_id():
    record("deployment.deleted", ("scheduler.deployment", 42), object_repr="default/llama")

    event = AuditEvent.objects.get()
    assert (event.object_type, event.object_id, event.object_repr) == ("scheduler.deployment", "42", "default/llama")


def test_record_many_writes_one_insert():
    entries = [AuditEntry("node.created", ("nodes.node", i), actor="system:inventory-sync") for i in range(20)]

    with CaptureQueriesContext(connection) as queries:
        assert record_many(entries) == 20

    inserts = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("INSERT")]
    assert len(inserts) == 1
    assert AuditEvent.objects.filter(verb="node.created").count() == 20


def test_record_many_of_nothing_writes_nothing():
    with CaptureQueriesContext(connection) as queries:
        assert record_many([]) == 0
    assert queries.captured_queries == []


def test_events_for_returns_one_objects_events_newest_first():
    now = timezone.now()
    record("a", ("nodes.node", 1), at=now - timedelta(minutes=2))
    record("b", ("nodes.node", 1), at=now - timedelta(minutes=1))
    record("c", ("nodes.node", 2), at=now)

    assert [e.verb for e in events_for(("nodes.node", 1))] == ["b", "a"]
    assert [e.verb for e in events_for(("nodes.node", 1), limit=1)] == ["b"]
