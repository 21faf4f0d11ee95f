"""`manage.py load_demo_deployments`: the demo's three gpuplane servers, each alone on a GPU of
a100-node-2 (a consolidation opportunity), placed through the deploy pipeline."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from lifecycle.models import AuditEvent
from nodes.cluster.backends import get_cluster
from nodes.demo import load_demo_cluster
from nodes.models import Partition
from scheduler.demo import BATCH_NAMESPACE, DEMO_DEPLOYMENTS, DEMO_NODE
from scheduler.models import Deployment, Placement

pytestmark = pytest.mark.django_db


def load(*args: str) -> str:
    out = StringIO()
    call_command("load_demo_deployments", *args, stdout=out)
    return out.getvalue()


def test_each_server_is_alone_on_its_gpu_and_the_batch_is_gone():
    load_demo_cluster()
    out = load("--if-empty")
    placements = Placement.objects.select_related("deployment", "node")
    assert {(p.deployment.name, p.node.name, tuple(p.gpu_indexes)) for p in placements} == {
        (d.name, DEMO_NODE, (d.gpu,)) for d in DEMO_DEPLOYMENTS}
    assert "inference/embeddings: a100-node-2 GPU 2" in out
    for demo in DEMO_DEPLOYMENTS:
        # Alone: no other pod or replica holds a slot of its GPU.
        held = Partition.objects.filter(gpu__node__name=DEMO_NODE, gpu__index=demo.gpu).exclude(hold=None)
        assert held.count() == 1 and not Partition.objects.filter(
            gpu__node__name=DEMO_NODE, gpu__index=demo.gpu).exclude(pod="").exists()
    assert not [p for p in get_cluster().list_gpu_pods() if p.namespace == BATCH_NAMESPACE
                and p.name.startswith("backfill-")]
    # Through the deploy pipeline: each has its decision and is audited.
    for deployment in Deployment.objects.all():
        assert deployment.decisions.exists()
    assert AuditEvent.objects.filter(object_type="scheduler.deployment").exists()
    assert set(Deployment.objects.values_list("sharing", flat=True)) == {"mps"}


def test_if_empty_leaves_a_users_deployments_alone():
    load_demo_cluster()
    load("--if-empty")
    assert "deployments exist already" in load("--if-empty")
    assert Deployment.objects.count() == 3


def test_outside_the_demo_cluster_if_empty_does_nothing_and_otherwise_it_is_refused(settings):
    assert "not the demo cluster" in load("--if-empty")
    assert not Deployment.objects.exists()
    with pytest.raises(CommandError, match="load_demo_cluster"):
        load()
    settings.GPUPLANE_CLUSTER = "kubernetes"
    with pytest.raises(CommandError, match="kubernetes"):
        load("--if-empty")
