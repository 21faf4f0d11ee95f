"""Two scale requests of one deployment at once (a PATCH and the autoscaler's tick) take turns and
end consistent (PostgreSQL only): each is applied whole or refused with a 409, never interleaved;
once the mover has carried out the removals, active placements = replicas, nothing leaked or
removed twice.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from lifecycle.errors import Conflict
from scheduler.models import Deployment, Move, Placement
from scheduler.services.autoscaling import scale_deployment, serving_count
from tests.moving.helpers import ACTIVE, ready_quarter_gpu_deployment, run_until_settled
from tests.races import POSTGRES_RACE
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock, check_invariants

pytestmark = [*POSTGRES_RACE, pytest.mark.usefixtures("no_watch")]


@pytest.mark.parametrize(("by_hand", "by_autoscaler"), [(5, 1), (1, 4), (4, 2), (2, 2)])
def test_two_scale_requests_at_once_end_consistent(by_hand, by_autoscaler):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=6, deployments=0)
    deployment = ready_quarter_gpu_deployment(cluster, clock, "chat")
    start = threading.Barrier(2)

    def scale(replicas: int, policy: str) -> str:
        try:
            start.wait()
            event = scale_deployment(Deployment.objects.get(pk=deployment.pk), replicas, user="otto", policy=policy,
                                     cluster=cluster)
            return f"{event.outcome}:{event.replicas_after}"
        except Conflict as error:
            assert "being scaled by another request" in str(error)
            return "refused"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(scale, (by_hand, by_autoscaler), ("manual", "gpuplane")))

    assert any(o != "refused" for o in outcomes), outcomes
    deployment.refresh_from_db()
    applied = [int(o.split(":")[1]) for o in outcomes if o != "refused"]
    assert deployment.replicas in applied  # the target one of them set, whole
    assert serving_count(deployment) == deployment.replicas
    run_until_settled(cluster, clock, served_check=False)  # a replica added may not be ready yet
    deployment.refresh_from_db()
    assert Placement.objects.filter(deployment=deployment, status__in=ACTIVE).count() == deployment.replicas
    removed = list(Move.objects.filter(deployment=deployment, kind="removal").values_list("original_id", flat=True))
    assert len(removed) == len(set(removed))  # no replica asked to leave twice
    check_invariants()
