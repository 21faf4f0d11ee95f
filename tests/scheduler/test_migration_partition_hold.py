"""The move of partition holds into scheduler.PartitionHold keeps every hold of a live database.

A database holding the demo cluster with running deployments is taken back to the previous
schema (where ``nodes.Partition.placement`` held partitions), checked there with raw SQL, and
migrated forward again: every placement, every hold and every GPU counter must be as before,
and the deployments must still be deletable with their capacity coming back.
"""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from nodes.models import GPU, Partition
from scheduler import services
from scheduler.models import Deployment, PartitionHold, Placement
from scheduler.services import DeploySpec
from tests.scheduler.inventory import FakeClock, check_invariants, demo_cluster

PREVIOUS = [("nodes", "0004_vocabulary_choices"), ("scheduler", "0004_vocabulary_choices")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def migrate_to_latest():
    """Every app to its newest migration (later migrations than the hold move included: the
    models these tests use are the current ones)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def snapshot():
    holds = sorted(PartitionHold.objects.values_list("partition_id", "placement_id"))
    gpus = sorted(GPU.objects.values_list("pk", "allocated_milli", "allocated_memory_mib"))
    placements = sorted(Placement.objects.values_list("pk", "deployment_id", "node_id", "status", "gpu_indexes"))
    partitions = sorted(Partition.objects.values_list("pk", "gpu_id", "kind", "slot", "share_milli", "pod"))
    return holds, gpus, placements, partitions


@pytest.mark.django_db(transaction=True)
def test_holds_survive_the_move_to_the_scheduler_side_and_back():
    clock = FakeClock()
    cluster = demo_cluster(clock)
    for name, memory, sharing, replicas in [("big", 40, "exclusive", 1), ("small", 8, "mps", 2),
                                            ("mig", 10, "mig", 1), ("shared", 6, "mps-weighted", 1)]:
        services.deploy(DeploySpec(name=name, model="m", memory_gb=memory, sharing=sharing, replicas=replicas),
                        cluster=cluster)
    clock.advance(5)
    for deployment in Deployment.objects.all():
        services.watch_deployment(deployment.pk, cluster=cluster)
    holds, gpus, placements, partitions = snapshot()
    assert len(holds) >= 5
    assert Deployment.objects.filter(status="running").count() == 4

    try:
        migrate(PREVIOUS)
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, placement_id FROM nodes_partition WHERE placement_id IS NOT NULL ORDER BY id")
            assert [tuple(row) for row in cursor.fetchall()] == holds
            cursor.execute("SELECT count(*) FROM nodes_partition")
            assert cursor.fetchone()[0] == len(partitions)
    finally:
        migrate_to_latest()

    assert snapshot() == (holds, gpus, placements, partitions)
    check_invariants()
    for deployment in Deployment.objects.all():
        services.delete_deployment(deployment, cluster=cluster)
    assert not PartitionHold.objects.exists()
    assert not GPU.objects.filter(allocated_milli__gt=0).exclude(partitions__pod__gt="").exists()
    check_invariants()
