"""Must-show 3: concurrent deploys through the HTTP API never over-allocate (PostgreSQL only).

200 requests from a pool of threads, each thread with its own database connection, race for a
cluster with exactly 50 free whole GPUs; 40 requests race for a namespace quota of 10. SQLite
serialises every writer, so the race only exists on PostgreSQL; these tests are skipped elsewhere.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from django.test import Client

from nodes.models import GPU, Partition
from scheduler.models import Deployment, NamespaceQuota, Placement
from scheduler.services import placing
from tests.nodes.factories import make_node, make_partition
from tests.races import POSTGRES_RACE
from tests.scheduler.inventory import check_invariants, free_whole_gpus, whole_gpu_cluster

pytestmark = [*POSTGRES_RACE, pytest.mark.usefixtures("no_watch")]

FREE_GPUS = 50
REQUESTS = 200
WORKERS = 24  # well under PostgreSQL's default max_connections of 100


def deploy_all(operator, gpu_counts: list[int], namespace: str = "default",
               **fields: object) -> list[tuple[int, int, dict]]:
    """POST one deployment per entry of ``gpu_counts`` from the thread pool; (gpus, status, body).

    ``fields`` override the request body (whole GPUs of 40 GB by default).
    """

    def one(number: int, gpus: int) -> tuple[int, int, dict]:
        try:
            client = Client()
            client.force_login(operator)
            response = client.post(
                "/api/v1/deployments/",
                {"name": f"race-{number}", "model": "m", "memory_gb": 40, "gpu_count": gpus, "sharing": "exclusive",
                 "allow_default_scheduler": False, "namespace": namespace, **fields},
                content_type="application/json",
            )
            return gpus, response.status_code, response.json()
        finally:
            connections.close_all()  # this thread's connection; the pool may reuse the thread

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(one, range(len(gpu_counts)), gpu_counts))


def test_200_one_gpu_deploys_against_50_free_gpus(operator):
    whole_gpu_cluster(FREE_GPUS, busy_per_node=1)
    assert free_whole_gpus() == FREE_GPUS

    results = deploy_all(operator, [1] * REQUESTS)

    statuses = Counter(status for _gpus, status, _body in results)
    assert statuses == {201: FREE_GPUS, 409: REQUESTS - FREE_GPUS}, statuses
    for _gpus, status, body in results:
        if status == 409:  # a clean NoCapacity: the diagnosis, not a conflict that gave up
            assert "0/8 nodes are available: " in body["detail"], body["detail"]
            assert body["decision"]["outcome"] == "unschedulable"
    assert free_whole_gpus() == 0
    assert Deployment.objects.count() == FREE_GPUS
    assert Partition.objects.filter(hold__isnull=False).count() == FREE_GPUS
    assert all(milli == 1000 for milli in GPU.objects.values_list("allocated_milli", flat=True))
    check_invariants()


def test_mixed_1_2_4_8_gpu_deploys_never_over_allocate(operator):
    whole_gpu_cluster(FREE_GPUS, busy_per_node=0)  # 6 nodes of 8 free GPUs and one of 2
    sizes = [1, 2, 4, 8] * (REQUESTS // 4)
    random.Random(3).shuffle(sizes)

    results = deploy_all(operator, sizes)

    statuses = Counter(status for _gpus, status, _body in results)
    assert set(statuses) <= {201, 409}, statuses
    placed_gpus = sum(gpus for gpus, status, _body in results if status == 201)
    assert 0 < placed_gpus <= FREE_GPUS
    for _gpus, status, body in results:
        if status == 409:
            assert "0/7 nodes are available: " in body["detail"], body["detail"]
    held = Partition.objects.filter(hold__isnull=False)
    assert held.count() == placed_gpus
    assert held.values("pk").distinct().count() == placed_gpus
    # Every placement holds exactly its gang, on one node.
    for placement in Placement.objects.prefetch_related("holds__partition__gpu"):
        gpus = [hold.partition for hold in placement.holds.all()]
        assert len(gpus) == placement.deployment.gpu_count
        assert {p.gpu.node_id for p in gpus} == {placement.node_id}
    check_invariants()


def test_concurrent_deploys_in_one_namespace_never_exceed_its_quota(operator):
    whole_gpu_cluster(FREE_GPUS, busy_per_node=1)  # capacity is plenty: only the quota limits
    NamespaceQuota.objects.create(namespace="team-q", max_gpu_milli=10_000)  # 10 whole GPUs

    results = deploy_all(operator, [1] * 40, namespace="team-q")

    statuses = Counter(status for _gpus, status, _body in results)
    assert statuses == {201: 10, 409: 30}, statuses
    for _gpus, status, body in results:
        if status == 409:  # the quota's diagnosis, not a conflict that gave up
            assert "0/8 nodes are available: " in body["detail"], body["detail"]
            assert "would take the namespace over its GPU quota" in body["detail"], body["detail"]
    held = Partition.objects.filter(hold__placement__deployment__namespace="team-q")
    assert held.count() == 10
    assert sum(held.values_list("share_milli", flat=True)) == 10_000
    assert free_whole_gpus() == FREE_GPUS - 10
    check_invariants()


def test_concurrent_mps_deploys_that_claim_side_by_side_never_exceed_the_quota(operator, monkeypatch):
    """MPS slots of one GPU are interchangeable, so concurrent deploys that chose the same GPU do
    not conflict on rows: only the quota re-check keeps them within the quota. (That it runs
    under the exclusive lock is asserted in test_quota.py: here every reservation of one GPU
    also waits on that GPU's row lock.)"""
    for number in (1, 2):  # 2 nodes x 8 GPUs x 4 MPS slots of 250 milli: 64 slots, plenty
        node = make_node(f"mps-{number}", gpu_count=8, sharing_mode="mps", sharing_replicas=4, partitions=False,
                         labels={"kubernetes.io/hostname": f"mps-{number}"})
        for gpu in node.gpus.all():
            for slot in range(4):
                make_partition(gpu, kind="mps", slot=slot, share_milli=250, memory_mib=gpu.memory_mib // 4)
    NamespaceQuota.objects.create(namespace="team-q", max_gpu_milli=2_500)  # 10 slots
    real_decide = placing.decide

    def slow_decide(*args, **options):
        # As on a large cluster: the use a decision read has time to go stale before it reserves.
        plans = real_decide(*args, **options)
        time.sleep(0.05)
        return plans

    monkeypatch.setattr(placing, "decide", slow_decide)

    # A tiny model (2 GB) is given a 25 % MPS slot.
    results = deploy_all(operator, [1] * 40, namespace="team-q", memory_gb=2, sharing="mps")

    statuses = Counter(status for _gpus, status, _body in results)
    assert statuses == {201: 10, 409: 30}, statuses
    for _gpus, status, body in results:
        if status == 409:
            assert "would take the namespace over its GPU quota" in body["detail"], body["detail"]
    assert sum(Partition.objects.filter(hold__isnull=False).values_list("share_milli", flat=True)) == 2_500
    check_invariants()
