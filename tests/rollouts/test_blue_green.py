"""Blue-green (rollouts/blue_green.py): the pool pre-warms all, then drains all, then reconfigures
all together; its workloads go to nodes outside it and none is ever unserved."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEVICE_PLUGIN_CONFIG, LABEL_GPU_REPLICAS, RESOURCE_GPU
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import render_device_plugin_config
from rollouts.blue_green import BARRIERS, hold_for_pool
from rollouts.choices import NodeState, RolloutStatus, RolloutStrategy
from rollouts.models import RollingUpdate, RolloutNode
from scheduler.models import Placement
from tests.rollouts.cluster import nodes
from tests.rollouts.simulated import MPS_2, MPS_4, mps_cluster, ready_replicas
from tests.rollouts.test_reconciler import run, started
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


def pks(verb: str, steps) -> list[int]:
    return list(AuditEvent.objects.filter(verb=verb, object_id__in=[str(s.pk) for s in steps])
                .order_by("pk").values_list("pk", flat=True))


class SlowToWarm(SimulatedCluster):
    """The copies of one deployment take ``delay_s`` longer to become ready: one blue node
    pre-warms well after the other, which the phases must wait for."""

    deployment: int | None = None
    until = 0.0

    def workload_ready(self, namespace: str, name: str) -> bool:
        placement = Placement.objects.filter(workload_name=name).order_by("-pk").first()
        if placement is not None and placement.deployment_id == SlowToWarm.deployment and self._now() < SlowToWarm.until:
            return False
        return super().workload_ready(namespace, name)


def test_a_blue_green_update_moves_the_pool_out_then_changes_it_in_three_clean_phases():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=5, deployments=4, cluster_class=SlowToWarm)
    blue = sorted({p.node.name for p in Placement.objects.select_related("node")})[:2]
    SlowToWarm.deployment = Placement.objects.filter(node__name=blue[0]).first().deployment_id
    SlowToWarm.until = clock.now + 20
    rollout = started(cluster, names=blue, strategy=RolloutStrategy.BLUE_GREEN)
    assert {s.batch_index for s in rollout.nodes.all()} == {1}  # the whole pool in one batch

    def every_workload_served():
        served = ready_replicas(cluster)
        assert min(served.values()) >= 1, f"a workload had no ready replica: {served}"

    rollout = run(cluster, clock, rollout, check=every_workload_served)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    steps = list(rollout.nodes.all())
    assert {s.state for s in steps} == {NodeState.SUCCEEDED}
    # Every workload of the pool went to a node outside it (the green side).
    prewarmed = AuditEvent.objects.filter(verb="rolloutnode.replica_prewarmed")
    assert prewarmed.count() >= 2
    for event in prewarmed:
        assert Placement.objects.get(pk=event.after["new_placement"]).node.name not in blue, event.reason
    # Phases: no eviction before every node pre-warmed; no switch before every node was drained.
    assert max(pks("rolloutnode.draining", steps)) < min(pks("rolloutnode.pod_evicted", steps))
    assert max(pks("rolloutnode.reconfiguring", steps)) < min(pks("rolloutnode.labels_switched", steps))
    label = render_device_plugin_config(MPS_4)[0]
    for node in cluster.list_nodes():
        if node.name in blue:
            assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == label and node.labels[LABEL_GPU_REPLICAS] == "4"
            assert node.allocatable[RESOURCE_GPU] == 4 and not node.unschedulable
        else:  # the green side is left as it was
            assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(MPS_2)[0]
    assert all(applied_config(n) == MPS_4 for n in Node.objects.filter(name__in=blue))
    assert not Placement.objects.filter(node__name__in=blue, status="running").exists()


def test_the_same_pool_rolled_as_one_batch_of_two_overlaps_the_phases():
    # The contrast that shows the phases above are blue-green's doing: a rolling batch lets the
    # fast node drain while the slow one still pre-warms.
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=5, deployments=4, cluster_class=SlowToWarm)
    blue = sorted({p.node.name for p in Placement.objects.select_related("node")})[:2]
    SlowToWarm.deployment = Placement.objects.filter(node__name=blue[0]).first().deployment_id
    SlowToWarm.until = clock.now + 20
    rollout = run(cluster, clock, started(cluster, names=blue, max_unavailable=2))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    steps = list(rollout.nodes.all())
    assert min(pks("rolloutnode.pod_evicted", steps)) < max(pks("rolloutnode.draining", steps))


@pytest.fixture
def pool():
    a, b, c = nodes("gpu-a", "gpu-b", "gpu-c")
    rollout = RollingUpdate.objects.create(name="bg", config=MPS_4.as_dict(), strategy=RolloutStrategy.BLUE_GREEN,
                                           status=RolloutStatus.RUNNING)
    old = datetime(2026, 1, 1, tzinfo=UTC)
    return [RolloutNode.objects.create(rollout=rollout, node=n, node_name=n.name, batch_index=1, state=state,
                                       step_started_at=old)
            for n, state in ((a, NodeState.PREWARMING), (b, NodeState.DRAINING), (c, NodeState.DRAINING))]


def test_a_node_ahead_of_the_pool_waits_at_the_barrier_with_its_step_timer_held(pool):
    now = datetime(2026, 1, 1, 1, tzinfo=UTC)
    moving = hold_for_pool(pool, pool, now)
    assert [s.node_name for s in moving] == ["gpu-a"]  # only the one still pre-warming works
    for step in RolloutNode.objects.filter(node_name__in=["gpu-b", "gpu-c"]):
        assert step.reason == BARRIERS[NodeState.DRAINING]
        assert step.step_started_at == now  # an hour of waiting is not an hour of draining


def test_once_the_slowest_node_catches_up_the_whole_pool_moves_on(pool):
    RolloutNode.objects.filter(node_name="gpu-a").update(state=NodeState.DRAINING)
    steps = list(RolloutNode.objects.order_by("node_name"))
    now = datetime(2026, 1, 1, 1, tzinfo=UTC)
    assert hold_for_pool(steps, steps, now) == steps
    # Reconfiguring waits for the drains the same way; verifying nodes never wait.
    RolloutNode.objects.filter(node_name="gpu-a").update(state=NodeState.RECONFIGURING)
    RolloutNode.objects.filter(node_name="gpu-c").update(state=NodeState.VERIFYING)
    steps = list(RolloutNode.objects.order_by("node_name"))
    moving = hold_for_pool(steps, steps, now + timedelta(seconds=5))
    assert [s.node_name for s in moving] == ["gpu-b", "gpu-c"]
    assert RolloutNode.objects.get(node_name="gpu-a").reason == BARRIERS[NodeState.RECONFIGURING]
