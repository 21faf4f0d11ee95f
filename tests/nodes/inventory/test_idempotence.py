"""Inventory sync, idempotence: a sync of an unchanged cluster writes nothing but the heartbeat
(one UPDATE of every seen node's last_seen).

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
    heartbeat_only,
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

    assert heartbeat_only(writes(queries))
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

    assert heartbeat_only(writes(queries))
    assert snapshot() == before


@pytest.mark.django_db
def test_every_sync_that_sees_a_node_refreshes_its_last_seen_in_one_update():
    cluster = FakeCluster([gpu_node("h1"), gpu_node("h2"), gpu_node("h3")])
    sync_inventory(cluster)
    recent = timezone.now() - timedelta(seconds=30)  # seen one sync ago: healthy, unchanged
    Node.objects.update(last_seen=recent)

    with CaptureQueriesContext(connection) as queries:
        report = sync_inventory(cluster)

    assert report.heartbeats == 3
    assert not report.changed
    assert all(seen > recent for seen in Node.objects.values_list("last_seen", flat=True))
    assert heartbeat_only(writes(queries))  # one UPDATE for the three nodes, not a save each


@pytest.mark.django_db
def test_inventory_sync_run_twice_on_the_demo_cluster_leaves_the_database_unchanged_the_second_time():
    load_demo_cluster()  # seeds the simulated cluster and runs the first sync
    before = snapshot()
    assert len(before["nodes"]) == 12

    with CaptureQueriesContext(connection) as queries:
        second = sync_inventory(get_cluster())  # a fresh backend reading the same state file

    assert heartbeat_only(writes(queries))
    assert snapshot() == before
    assert not second.changed and second.unplaced_pods == [] and second.unknown_products == []
