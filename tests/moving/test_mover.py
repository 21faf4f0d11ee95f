"""The mover: replacement first, eviction through the Eviction API only, every step audited;
rolled back (nothing leaked) when it cannot go on; failing loudly when a replica is lost."""
from __future__ import annotations

import pytest

from lifecycle.errors import Conflict
from lifecycle.models import AuditEvent
from scheduler.models import Placement
from scheduler.services import moving
from scheduler.services.moving import cancel_move, request_move
from tests.moving.helpers import ACTIVE, assert_no_leak, run_until_settled, tick
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def spread():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    return clock, cluster


def a_replica_and_a_free_node() -> tuple[Placement, str]:
    original = Placement.objects.select_related("node", "deployment").filter(status__in=ACTIVE).first()
    busy = set(Placement.objects.filter(status__in=ACTIVE).values_list("node__name", flat=True))
    free = sorted({"gpu-1", "gpu-2", "gpu-3"} - busy)[0]
    return original, free


def test_it_places_the_replacement_then_evicts_the_original(spread):
    clock, cluster = spread
    original, free = a_replica_and_a_free_node()
    evicted = []
    real_evict = cluster.evict_pod
    cluster.evict_pod = lambda ns, name: (evicted.append(f"{ns}/{name}"), real_evict(ns, name))[1]
    move = request_move(original, why="test", requested_by="user", requester="test:1", to_node=free)

    [moved] = run_until_settled(cluster, clock)

    assert moved.pk == move.pk and moved.status == "done", moved.reason
    assert len(evicted) == 1 and moved.evicted_pod == evicted[0]
    original.refresh_from_db()
    assert original.status == "released"
    assert moved.replacement.node.name == free and moved.replacement.status in ("binding", "running")
    assert moved.placed_at <= moved.ready_at <= moved.evicted_at and moved.finished_at
    verbs = list(AuditEvent.objects.filter(object_type="scheduler.move", object_id=str(move.pk))
                 .order_by("pk").values_list("verb", flat=True))
    assert verbs == ["move.planned", "move.replacement_placed", "move.replacement_ready", "move.original_evicting",
                     "move.done"]
    assert_no_leak()


def test_asking_twice_is_one_move_and_another_requester_gets_a_409(spread):
    original, free = a_replica_and_a_free_node()
    first = request_move(original, why="a", requested_by="user", requester="test:1", to_node=free)
    assert request_move(original, why="a", requested_by="user", requester="test:1", to_node=free).pk == first.pk
    with pytest.raises(Conflict):
        request_move(original, why="b", requested_by="consolidation", requester="consolidationplan:9")


def test_a_replacement_that_does_not_fit_rolls_back_with_nothing_evicted(spread):
    clock, cluster = spread
    original, _ = a_replica_and_a_free_node()
    pods = sorted(p.key for p in cluster.list_gpu_pods())
    move = request_move(original, why="t", requested_by="user", requester="test:1", to_node="no-such-node")
    [moved] = run_until_settled(cluster, clock)
    assert moved.pk == move.pk and moved.status == "rolled_back" and "nothing evicted" in moved.reason
    assert sorted(p.key for p in cluster.list_gpu_pods()) == pods
    assert_no_leak()


def test_a_replacement_never_ready_is_given_back_at_the_timeout(spread):
    clock, cluster = spread
    original, free = a_replica_and_a_free_node()
    cluster.pod_ready_delay_s = 10_000.0
    request_move(original, why="t", requested_by="user", requester="test:1", to_node=free, timeout_s=20)
    [moved] = run_until_settled(cluster, clock)
    assert moved.status == "rolled_back" and "its replacement was not ready in time (20 s)" in moved.reason
    original.refresh_from_db()
    assert original.status in ACTIVE and moved.replacement.status == "released"
    assert_no_leak()


def test_a_cancelled_move_gives_its_replacement_back(spread):
    clock, cluster = spread
    original, free = a_replica_and_a_free_node()
    cluster.pod_ready_delay_s = 10_000.0
    move = request_move(original, why="t", requested_by="user", requester="test:1", to_node=free)
    tick(cluster, clock)
    move.refresh_from_db()
    assert move.status == "replacement_placed"
    assert cancel_move(move, reason="the rollout failed", cluster=cluster)
    move.refresh_from_db()
    assert move.status == "rolled_back" and move.replacement.status == "released"
    assert_no_leak()


class WorkerKilled(BaseException):
    """The worker dies here (SIGKILL): nothing after it runs."""


def test_a_replica_that_does_not_come_back_fails_loudly(spread, monkeypatch):
    clock, cluster = spread
    original, free = a_replica_and_a_free_node()
    move = request_move(original, why="t", requested_by="user", requester="test:1", to_node=free, timeout_s=30)
    tick(cluster, clock)  # placed
    clock.advance(3)

    def die(*args, **kwargs):
        raise WorkerKilled

    monkeypatch.setattr(moving, "_finish", die)
    with pytest.raises(WorkerKilled):  # the original is evicted, then the worker dies
        tick(cluster, clock)
    monkeypatch.undo()
    move.refresh_from_db()
    assert move.status == "original_evicting" and move.evicted_pod
    # Meanwhile the replacement's pod dies and does not come back.
    cluster.pod_ready_delay_s = 10_000.0
    for pod in cluster.list_gpu_pods():
        if pod.labels.get("app.kubernetes.io/name") == move.replacement.workload_name:
            cluster.delete_pod(pod.namespace, pod.name)
    [moved] = run_until_settled(cluster, clock, served_check=False)
    assert moved.status == "failed" and moved.lost and "replica lost" in moved.reason, moved.reason
    deployment = moved.deployment
    assert "lost" in deployment.message
    assert AuditEvent.objects.filter(verb="deployment.replica_lost", object_id=str(deployment.pk)).exists()
    assert Placement.objects.filter(deployment=deployment, status__in=ACTIVE).count() == deployment.replicas - 1
    assert_no_leak()
