"""The new-rollout form (issue 23): each node shows its sharing config now, and the nodes may be
picked by label (a nodeSelector, as the API's `node_selector`) instead of by name."""
from __future__ import annotations

import pytest
from django.test import Client

from rollouts.models import RollingUpdate
from tests.rollouts.cluster import nodes

pytestmark = pytest.mark.django_db

NEW = "/rollouts/new/"


@pytest.fixture
def cluster():
    """gpu-a and gpu-b in pool serving (time-slicing x 2 and exclusive), gpu-c elsewhere."""
    a, b, c = nodes("gpu-a", "gpu-b", "gpu-c")
    for node, pool, mode, replicas in ((a, "serving", "timeslice", 2), (b, "serving", "exclusive", 1),
                                      (c, "batch", "exclusive", 1)):
        node.labels = {**node.labels, "pool": pool}
        node.sharing_mode, node.sharing_replicas = mode, replicas
        node.save()
    return a, b, c


def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def body(**fields):
    return {"name": "mps4", "mode": "mps", "replicas": "4", "mig_layout": "", "strategy": "rolling",
            "max_unavailable": "1", "on_failure": "pause", **fields}


def test_each_node_choice_shows_its_current_sharing_config(operator, cluster):
    page = operator_client(operator).get(NEW).content.decode()
    assert "gpu-a (2 × H100-SXM5-80GB) · now timeslice × 2" in page
    assert "gpu-b (2 × H100-SXM5-80GB) · now exclusive" in page
    assert 'name="node_selector"' in page


def test_a_label_selector_picks_the_nodes_carrying_every_label(operator, cluster):
    response = operator_client(operator).post(NEW, body(node_selector="pool=serving", create="1"))

    assert response.status_code == 302, response.content.decode()[:3000]
    rollout = RollingUpdate.objects.get()
    assert sorted(rollout.nodes.values_list("node_name", flat=True)) == ["gpu-a", "gpu-b"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"node_selector": "pool=nowhere"}, "No node has all of these labels."),
    ({"node_selector": "pool"}, "Write each label as key=value"),
    ({"node_selector": "pool=serving", "nodes": ["gpu-c"]}, "not both and not neither"),
    ({}, "not both and not neither"),
])
def test_the_form_says_what_is_wrong_with_the_targets(operator, cluster, fields, message):
    page = operator_client(operator).post(NEW, body(preview="1", **fields)).content.decode()
    assert message in page
    assert not RollingUpdate.objects.exists()
