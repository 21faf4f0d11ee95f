"""scheduler.services: agreement with inventory sync (on the demo cluster)."""
from __future__ import annotations

import pytest

from nodes.inventory.sync import sync_inventory
from scheduler import services
from tests.scheduler.inventory import FakeClock, capacity_state, check_invariants, demo_cluster
from tests.scheduler.services.specs import spec

pytestmark = pytest.mark.django_db


# ---- agreement with inventory sync ----------------------------------------------------------------


def test_inventory_sync_counts_our_pods_exactly_once():
    clock = FakeClock()
    cluster = demo_cluster(clock)
    for overrides in [
        {"name": "whole", "memory_gb": 40, "priority": "high", "latency_slo_ms": 50},
        {"name": "weighted", "memory_gb": 2, "sharing": "mps-weighted", "replicas": 2},
        {"name": "slices", "memory_gb": 3, "sharing": "timeslice"},
        {"name": "mig", "memory_gb": 4, "sharing": "mig"},
        {"name": "mps", "memory_gb": 8, "priority": "low", "replicas": 3},
    ]:
        services.deploy(spec(**overrides), cluster=cluster)
    clock.advance(5)  # every pod bound and running
    assert all(p.phase == "Running" for p in cluster.list_gpu_pods())
    reserved = capacity_state()

    report = sync_inventory(cluster)

    assert report.unplaced_pods == []
    assert capacity_state() == reserved
    check_invariants()
