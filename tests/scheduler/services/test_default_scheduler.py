"""scheduler.services: handing replicas to the default scheduler, and when not to (on the demo cluster)."""
from __future__ import annotations

import pytest

from nodes.cluster.manifests import pinned_node
from scheduler import services
from scheduler.choices import DecisionOutcome, DeploymentStatus
from scheduler.models import Deployment
from scheduler.services import NoCapacity
from tests.scheduler.inventory import capacity_state, set_utilization
from tests.scheduler.services.specs import spec, workload

pytestmark = pytest.mark.django_db


# ---- default scheduler ---------------------------------------------------------------------------


def test_disabled_gpu_selection_hands_every_replica_to_the_default_scheduler(cluster):
    before = capacity_state()

    deployment = services.deploy(spec(enable_gpu_selection=False, replicas=2), cluster=cluster)

    assert deployment.status == DeploymentStatus.PLACED
    assert list(deployment.decisions.values_list("outcome", flat=True)) == ["skipped", "skipped"]
    assert all(p.node_id is None for p in deployment.placements.all())
    assert capacity_state() == before  # nothing reserved by gpuplane
    (name,) = {p.workload_name for p in deployment.placements.all()}
    manifest = workload(cluster, name)
    assert pinned_node(manifest) is None and manifest["spec"]["replicas"] == 2
    assert services.placement_summary(deployment.placements.first())["sharing"] == "default-scheduler"


def test_busy_gpus_hand_over_to_the_default_scheduler_when_allowed(cluster):
    set_utilization("", 95.0)  # every GPU of every node

    deployment = services.deploy(spec(name="busy"), cluster=cluster)

    decision = deployment.decisions.get()
    assert decision.outcome == DecisionOutcome.DEFAULT_SCHEDULER
    assert decision.matrix["outcome"] == "default-scheduler"
    assert "handed over to the default Kubernetes scheduler" in decision.message
    busy = decision.matrix["diagnosis"]["rejected"]["utilization >= 90%"]
    assert f"{busy} nodes have the capacity but are busy by telemetry" in decision.message
    assert deployment.placements.get().node_id is None


def test_busy_gpus_are_a_conflict_when_the_handover_is_not_allowed(cluster):
    set_utilization("", 95.0)

    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="busy", allow_default_scheduler=False), cluster=cluster)

    assert "utilization >= 90%" in raised.value.message


def test_a_capacity_shortage_is_never_handed_over(cluster):
    with pytest.raises(NoCapacity):
        services.deploy(spec(name="huge", memory_gb=200, allow_default_scheduler=True), cluster=cluster)
    assert not Deployment.objects.exists()
