"""Fixtures of the mover's tests."""
from __future__ import annotations

import pytest

from nodes.contract import LABEL_DEPLOYMENT
from scheduler.models import Placement
from scheduler.services.moving import request_move
from tests.moving.helpers import ACTIVE, run_until_settled, tick
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock


@pytest.fixture
def moves(db):
    """Two moves: one done (a consolidation plan's), one held back at its eviction by a PDB (a rollout's)."""
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=2)
    first, second = Placement.objects.select_related("node", "deployment").filter(status__in=ACTIVE).order_by("pk")
    busy = {first.node.name, second.node.name}
    free = sorted({"gpu-1", "gpu-2", "gpu-3", "gpu-4"} - busy)
    done = request_move(first, why="frees gpu", requested_by="consolidation", requester="consolidationplan:3",
                        to_node=free[0])
    run_until_settled(cluster, clock)
    cluster.add_pdb(second.deployment.namespace, "keep", {LABEL_DEPLOYMENT: str(second.deployment.pk)},
                    min_available="100%")
    blocked = request_move(second, why="reconfigures its node", requested_by="rollout", requester="rollout:1",
                           to_node=free[1])
    for _ in range(5):
        tick(cluster, clock)
    return done, blocked


