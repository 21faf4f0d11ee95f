"""The analysis hands namespace quotas to the planner: a plan never moves a replica whose
replacement (held alongside the original until it is ready) would take its namespace over quota."""
from __future__ import annotations

import pytest

from consolidation.analysis import analyse, namespace_quotas
from scheduler.core.consolidation import PlanQuota
from scheduler.models import NamespaceQuota
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def spread():
    """Three one-GPU MPS R=2 nodes, two one-replica deployments (500-milli slots) on two of them."""
    return mps_cluster(FakeClock(), node_count=3, deployments=2)


def test_the_planner_gets_the_quota_and_use_the_scheduler_enforces(spread):
    NamespaceQuota.objects.create(namespace="default", max_gpu_milli=4000, max_memory_mib=65536)
    assert namespace_quotas({"default", "other"}) == {"default": PlanQuota(4000, 1000, 65536, 16384)}


@pytest.mark.parametrize(("max_gpu_milli", "max_memory_mib", "moves"), [
    (None, None, 1),     # no limit
    (1500, None, 1),     # 1000 held + the replacement's 500 slot
    (1499, None, 0),     # one milli short: the replacement would break the quota
    (None, 16384, 0),    # 2 x 8 GiB held: no room for the replacement's 8 GiB
    (None, 24576, 1),
])
def test_a_move_needs_room_for_its_replacement_in_the_quota(spread, max_gpu_milli, max_memory_mib, moves):
    if max_gpu_milli is not None or max_memory_mib is not None:
        NamespaceQuota.objects.create(namespace="default", max_gpu_milli=max_gpu_milli, max_memory_mib=max_memory_mib)
    plan = analyse()
    if not moves:
        assert plan is None  # nothing to move: no plan is stored
        return
    assert len(plan.moves) == moves
    assert len(plan.nodes_freed) == moves
