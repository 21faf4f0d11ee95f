"""Inventory sync, idempotence: a sync of an unchanged cluster writes nothing, whether it reads the
whole cluster (a backend without watch, a relist) or only what changed (a watch).

Most tests drive the sync with FakeCluster (tests/nodes/inventory/helpers.py), a backend that just
returns the value objects it was given, so each rule is tested without the simulator in the way.
The arithmetic of the expected shares and memory is written next to each assertion.
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nodes.cluster.backends import get_cluster
from nodes.demo import load_demo_cluster
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from tests.nodes.inventory.helpers import (
    FakeCluster,
    every_mode_cluster,
    gpu_node,
    no_writes,
    partitions_of,
    placement_on,
    snapshot,
    writes,
)


@pytest.mark.django_db
def test_inventory_sync_run_twice_leaves_the_database_unchanged_the_second_time():
    cluster = every_mode_cluster()
    first = sync_inventory(cluster)
    assert first.changed and first.unplaced_pods == []
    assert set(Node.objects.values_list("sharing_mode", flat=True)) == {"exclusive", "mig", "mps", "timeslice", "mps-weighted"}
    before = snapshot()

    with CaptureQueriesContext(connection) as queries:
        second = sync_inventory(cluster)

    assert no_writes(writes(queries))
    assert snapshot() == before
    assert not second.changed
    assert second.heartbeats == Node.objects.count()


@pytest.mark.django_db
def test_a_steady_cluster_with_placements_stays_write_free():
    cluster = every_mode_cluster()
    sync_inventory(cluster)
    placement_on(partitions_of("mps4", 1)[3])
    sync_inventory(cluster)  # takes the placement into the GPU's totals
    before = snapshot()

    with CaptureQueriesContext(connection) as queries:
        sync_inventory(cluster)

    assert no_writes(writes(queries))
    assert snapshot() == before


@pytest.mark.django_db
def test_an_unchanged_node_is_not_written_and_a_changed_one_moves_its_last_seen():
    cluster = FakeCluster([gpu_node("h1"), gpu_node("h2"), gpu_node("h3")])
    sync_inventory(cluster)
    earlier = timezone.now() - timedelta(seconds=30)
    Node.objects.update(last_seen=earlier)
    cluster.nodes[1] = gpu_node("h2", unschedulable=True)

    with CaptureQueriesContext(connection) as queries:
        report = sync_inventory(cluster)

    assert report.heartbeats == 2 and report.updated["nodes"] == 1
    seen = dict(Node.objects.values_list("name", "last_seen"))
    assert seen["h1"] == seen["h3"] == earlier  # not written: no heartbeat UPDATE per sync
    assert seen["h2"] > earlier
    assert len(writes(queries)) == 2  # the node's UPDATE and the audit event's INSERT


@pytest.mark.django_db
def test_inventory_sync_run_twice_on_the_demo_cluster_leaves_the_database_unchanged_the_second_time():
    load_demo_cluster()  # seeds the simulated cluster and runs the first sync
    before = snapshot()
    assert len(before["nodes"]) == 12

    with CaptureQueriesContext(connection) as queries:
        second = sync_inventory(get_cluster())  # a fresh backend reading the same state file

    assert no_writes(writes(queries))
    assert snapshot() == before
    assert not second.changed and second.unplaced_pods == [] and second.unknown_products == []
