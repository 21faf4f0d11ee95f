"""The audit trail on object pages: a node's page shows inventory changes, a deployment's its life."""
from __future__ import annotations

import pytest
from django.test import Client

from nodes.models import Node
from scheduler import services
from scheduler.services import DeploySpec
from tests.scheduler.inventory import FakeClock, demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def activity(html: str) -> str:
    start = html.index('id="activity-table"')
    return html[start:html.index("</table>", start)]


def test_a_node_page_shows_what_inventory_sync_changed(browser):
    demo_cluster()
    node = Node.objects.order_by("name").first()

    response = browser.get(f"/nodes/{node.name}/")

    assert response.status_code == 200
    rows = activity(response.content.decode())
    assert "node.created" in rows and "system:inventory-sync" in rows and "found on the cluster" in rows
    assert "gpu.created" in rows
    assert f"object_type=nodes.node&amp;object_id={node.pk}" in response.content.decode()


def test_a_deployment_page_shows_its_life(browser, operator):
    clock = FakeClock()
    cluster = demo_cluster(clock)
    deployment = services.deploy(DeploySpec(name="web", model="m", memory_gb=8), user=operator, cluster=cluster)
    clock.advance(5)
    services.watch_deployment(deployment.pk, cluster=cluster)

    rows = activity(browser.get(f"/deployments/{deployment.pk}/").content.decode())

    for verb in ("deployment.created", "placement.reserved", "deployment.placed", "deployment.running"):
        assert verb in rows, verb
    assert operator.username in rows
    assert rows.index("deployment.running") < rows.index("deployment.created")  # newest first
