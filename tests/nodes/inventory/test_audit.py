"""Inventory sync, audit trail: each change to the inventory is an event by "system:inventory-sync",
all of one sync stored with one INSERT, and none at all when nothing changed."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lifecycle.models import AuditEvent
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, Node
from tests.nodes.inventory.helpers import (
    A100,
    A100_MIB,
    FakeCluster,
    every_mode_cluster,
    gpu_node,
    partitions_of,
    pod,
    sharing_labels,
)

pytestmark = pytest.mark.django_db


def events(verb: str | None = None) -> list[tuple[str, str, str]]:
    """(verb, object type, object repr) of the recorded events, oldest first."""
    rows = AuditEvent.objects.order_by("id")
    if verb is not None:
        rows = rows.filter(verb=verb)
    return [(e.verb, e.object_type, e.object_repr) for e in rows]


def audit_inserts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries
            if q["sql"].lstrip().upper().startswith("INSERT") and "lifecycle_auditevent" in q["sql"]]


def test_a_new_node_and_its_gpus_are_recorded_in_one_insert():
    with CaptureQueriesContext(connection) as queries:
        sync_inventory(FakeCluster([gpu_node("h1", gpu_count=2), gpu_node("h2", gpu_count=1)]))

    assert len(audit_inserts(queries)) == 1
    assert events() == [
        ("node.created", "nodes.node", "h1"),
        ("node.created", "nodes.node", "h2"),
        ("gpu.created", "nodes.gpu", "h1/gpu0"),
        ("gpu.created", "nodes.gpu", "h1/gpu1"),
        ("gpu.created", "nodes.gpu", "h2/gpu0"),
    ]
    created = AuditEvent.objects.get(verb="node.created", object_repr="h1")
    h1 = Node.objects.get(name="h1")
    assert (created.actor, created.object_id, created.reason) == ("system:inventory-sync", str(h1.pk), "found on the cluster")
    assert created.after == {
        "gpu_product": "NVIDIA-H100-80GB-HBM3", "gpu_count": 2, "sharing_mode": "exclusive", "sharing_replicas": 1,
        "ready": True, "cordoned": False,
    }
    gpu0 = AuditEvent.objects.get(verb="gpu.created", object_repr="h1/gpu0")
    assert gpu0.object_id == str(GPU.objects.get(uuid="GPU-h1-0").pk)
    assert gpu0.after == {"uuid": "GPU-h1-0", "model": "H100-SXM5-80GB", "memory_mib": 81559, "mig_enabled": False}


def test_a_sync_that_changes_nothing_records_nothing():
    cluster = every_mode_cluster()
    sync_inventory(cluster)
    recorded = AuditEvent.objects.count()
    Node.objects.filter(name="excl").update(last_seen=timezone.now() - timedelta(seconds=301))

    with CaptureQueriesContext(connection) as queries:
        report = sync_inventory(cluster)  # only a heartbeat, which is no change

    assert report.heartbeats == Node.objects.count() and not report.changed  # every node seen; none changed
    assert audit_inserts(queries) == []
    assert AuditEvent.objects.count() == recorded


def test_pods_coming_and_going_are_no_inventory_events():
    cluster = FakeCluster([gpu_node("h1", gpu_count=2)])
    sync_inventory(cluster)
    recorded = AuditEvent.objects.count()

    cluster.pods = [pod("ml/train-0", "h1", gpus="0")]
    report = sync_inventory(cluster)

    assert report.changed  # the partition and the GPU's counters were written...
    assert AuditEvent.objects.count() == recorded  # ...but which pod uses which partition is no audit event


def test_changed_node_fields_are_recorded_before_and_after():
    cluster = FakeCluster([gpu_node("h1", labels={"zone": "a", "rack": "r1"})])
    sync_inventory(cluster)
    cluster.nodes = [gpu_node("h1", ready=False, unschedulable=True, labels={"zone": "b", "team": "ml"})]

    sync_inventory(cluster)

    [updated] = AuditEvent.objects.filter(verb="node.updated")
    assert (updated.actor, updated.object_type, updated.object_repr) == ("system:inventory-sync", "nodes.node", "h1")
    # Labels: only the keys that changed (zone), were removed (rack) or were added (team).
    assert updated.before == {"labels": {"rack": "r1", "zone": "a"}, "ready": True, "cordoned": False}
    assert updated.after == {"labels": {"team": "ml", "zone": "b"}, "ready": False, "cordoned": True}
    assert not AuditEvent.objects.filter(verb="node.sharing_changed").exists()


def test_a_sharing_mode_change_is_its_own_event():
    cluster = FakeCluster([gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=1)])
    sync_inventory(cluster)
    cluster.nodes = [gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=1, labels=sharing_labels("mps", 2, "mps-2"))]

    sync_inventory(cluster)

    [changed] = AuditEvent.objects.filter(verb="node.sharing_changed")
    assert changed.object_repr == "a1"
    assert changed.before == {"sharing_mode": "exclusive", "sharing_replicas": 1, "applied_config": ""}
    assert changed.after == {"sharing_mode": "mps", "sharing_replicas": 2, "applied_config": "mps-2"}
    # The labels that carry the new mode are the node's other change.
    [updated] = AuditEvent.objects.filter(verb="node.updated")
    assert set(updated.after["labels"]) == {
        "nvidia.com/gpu.sharing-strategy", "nvidia.com/gpu.replicas", "nvidia.com/device-plugin.config",
    }
    assert events()[-2:] == [("node.sharing_changed", "nodes.node", "a1"), ("node.updated", "nodes.node", "a1")]


def test_a_node_gone_from_the_cluster_is_recorded_deleted_with_its_gpus():
    cluster = FakeCluster([gpu_node("keep", gpu_count=1), gpu_node("drop", gpu_count=2)])
    sync_inventory(cluster)
    drop = Node.objects.get(name="drop")
    gpu_ids = sorted(GPU.objects.filter(node=drop).values_list("pk", flat=True))
    first = AuditEvent.objects.order_by("-id").first()
    assert first is not None

    cluster.nodes = [gpu_node("keep", gpu_count=1)]
    with CaptureQueriesContext(connection) as queries:
        sync_inventory(cluster)

    assert len(audit_inserts(queries)) == 1
    new = AuditEvent.objects.filter(id__gt=first.pk).order_by("id")
    assert [(e.verb, e.object_type, e.object_id, e.object_repr) for e in new] == [
        ("node.deleted", "nodes.node", str(drop.pk), "drop"),
        ("gpu.deleted", "nodes.gpu", str(gpu_ids[0]), "drop/gpu0"),
        ("gpu.deleted", "nodes.gpu", str(gpu_ids[1]), "drop/gpu1"),
    ]
    assert {e.reason for e in new} == {"gone from the cluster"}
    assert new[1].before == {"uuid": "GPU-drop-0"}


def test_a_gpu_gone_from_a_node_is_recorded_deleted():
    cluster = FakeCluster([gpu_node("h1", gpu_count=3)])
    sync_inventory(cluster)

    cluster.nodes = [gpu_node("h1", gpu_count=2)]
    sync_inventory(cluster)

    assert events("gpu.deleted") == [("gpu.deleted", "nodes.gpu", "h1/gpu2")]
    assert events("node.updated") == [("node.updated", "nodes.node", "h1")]  # gpu_count and its GFD label


def test_a_gone_node_kept_for_its_holder_is_recorded_once(holder):
    cluster = FakeCluster([gpu_node("keep", gpu_count=1), gpu_node("held", gpu_count=1)])
    sync_inventory(cluster)
    holder.hold(partitions_of("held", 0)[0])

    cluster.nodes = [gpu_node("keep", gpu_count=1)]
    sync_inventory(cluster)
    again = sync_inventory(cluster)  # still gone, still kept: nothing new to record

    [kept] = AuditEvent.objects.filter(verb="node.kept")
    assert (kept.object_repr, kept.before, kept.after) == ("held", {"ready": True}, {"ready": False})
    assert kept.reason == "gone from the cluster; kept while a holder refers to it"
    assert again.gone_nodes_kept == ["held"]
    assert not AuditEvent.objects.filter(verb__in=["node.deleted", "gpu.deleted"]).exists()
