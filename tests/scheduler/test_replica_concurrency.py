"""place_replicas / release_replica racing on one deployment never over-allocate (PostgreSQL only).

Threads, each with its own database connection, add replicas to one deployment on a cluster with
exactly 10 free whole GPUs, then release them twice over: the same placement lock, conditional
claims and check constraints as a deploy, so exactly the free capacity is handed out, and each
replica is released exactly once.
"""
from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from scheduler import services
from scheduler.models import Deployment, PartitionHold
from scheduler.services import DeploySpec, NoCapacity, placing
from tests.races import POSTGRES_RACE
from tests.scheduler.inventory import check_invariants, empty_cluster, free_whole_gpus, whole_gpu_cluster

pytestmark = [*POSTGRES_RACE, pytest.mark.usefixtures("no_watch")]


def test_racing_replica_additions_and_releases_keep_capacity_exact():
    whole_gpu_cluster(10, busy_per_node=1)
    deployment = services.deploy(DeploySpec(name="scale", model="m", memory_gb=40, sharing="exclusive",
                                            allow_default_scheduler=False), cluster=empty_cluster())

    def add(index: int) -> str:
        try:
            services.place_replicas(Deployment.objects.get(pk=deployment.pk), [index], cluster=empty_cluster())
            return "placed"
        except NoCapacity:
            return "no capacity"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=12) as pool:
        added = Counter(pool.map(add, range(1, 41)))

    assert added == {"placed": 9, "no capacity": 31}
    assert free_whole_gpus() == 0
    assert PartitionHold.objects.count() == 10
    check_invariants()

    active = list(deployment.placements.filter(status__in=placing.ACTIVE_PLACEMENT)
                  .values_list("replica_index", flat=True))

    def release(index: int) -> bool:
        try:
            return services.release_replica(Deployment.objects.get(pk=deployment.pk), index, cluster=empty_cluster())
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=12) as pool:
        released = list(pool.map(release, active * 2))

    assert sum(released) == len(active) == 10
    assert not PartitionHold.objects.exists()
    assert free_whole_gpus() == 10
    check_invariants()
