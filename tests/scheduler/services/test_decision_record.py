"""A deploy's decision matrices are stored after the reservation commits (not under the
placement lock), labelled onto its workloads, and a failure to store them releases everything."""
from __future__ import annotations

import pytest
from django.db import connection

from scheduler import services
from scheduler.choices import DeploymentStatus
from scheduler.models import Decision, Deployment
from scheduler.services import placing
from scheduler.services.snapshots import SNAPSHOTS
from scheduler.workloads import ANNOTATION_DECISIONS
from tests.scheduler.inventory import check_invariants, empty_cluster, free_whole_gpus, whole_gpu_cluster
from tests.scheduler.services.specs import spec

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_broker(no_watch):
    SNAPSHOTS.invalidate()
    yield
    SNAPSHOTS.invalidate()


def test_the_matrix_is_stored_outside_the_reservation_and_labels_the_workload(monkeypatch):
    whole_gpu_cluster(4, gpus_per_node=2, busy_per_node=0)
    cluster = empty_cluster()
    seen = []
    record = placing._record_decisions

    def recording(deployment, plans, node_pks):
        seen.append(connection.in_atomic_block)
        return record(deployment, plans, node_pks)

    created = []
    create = placing.create_workloads

    def creating(backend, specs):
        created.extend(specs)
        return create(backend, specs)

    monkeypatch.setattr(placing, "_record_decisions", recording)
    monkeypatch.setattr(placing, "create_workloads", creating)
    deployment = services.deploy(spec(name="explained", sharing="exclusive", memory_gb=40, replicas=2),
                                 cluster=cluster)

    assert seen == [False]  # the reservation's transaction (and the placement lock) had ended
    decisions = list(Decision.objects.filter(deployment=deployment).order_by("replica_index"))
    assert [d.replica_index for d in decisions] == [0, 1]
    for decision in decisions:
        assert decision.matrix["rows"] and decision.matrix["plugins"]
        assert decision.matrix["node"] == decision.node.name
    named = {pk for workload in created for pk in workload.annotations[ANNOTATION_DECISIONS].split(",")}
    assert named == {str(d.pk) for d in decisions}


def test_a_matrix_that_cannot_be_stored_releases_the_reservation(monkeypatch):
    whole_gpu_cluster(4, gpus_per_node=2, busy_per_node=0)
    cluster = empty_cluster()
    free = free_whole_gpus()

    def broken(deployment, plans, node_pks):
        raise RuntimeError("database went away")

    created = []
    monkeypatch.setattr(placing, "_record_decisions", broken)
    monkeypatch.setattr(placing, "create_workloads", lambda backend, specs: created.extend(specs))
    with pytest.raises(RuntimeError):
        services.deploy(spec(name="unexplained", sharing="exclusive", memory_gb=40), cluster=cluster)

    deployment = Deployment.objects.get(name="unexplained")
    assert deployment.status == DeploymentStatus.FAILED
    assert free_whole_gpus() == free
    assert created == []  # nothing was started on the cluster
    check_invariants()
