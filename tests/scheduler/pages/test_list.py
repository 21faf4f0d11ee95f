"""The deployment pages: the list and its filters.

Deploys go through the real services on the 12-node demo cluster (nodes.demo) in the simulator,
so the matrix on the page is the one the placement engine stored.
"""
from __future__ import annotations

import re

import pytest

from scheduler import services
from scheduler.models import Deployment
from tests.scheduler.pages.deploying import deploy
from tests.scheduler.pages.html_tables import row_texts

pytestmark = pytest.mark.django_db

# ---- list and filters ------------------------------------------------------------------------------


@pytest.fixture
def three_deployments(demo) -> dict[str, Deployment]:
    """search/embedder (placed, 2 replicas), ml/chat (placed, 40 GB high), ml/old (deleted)."""
    embedder = deploy(name="embedder", namespace="search", replicas=2, priority="low", workload_type="batch")
    chat = deploy(name="chat", namespace="ml", memory_gb=40, priority="high", latency_slo_ms=100)
    old = deploy(name="old", namespace="ml", memory_gb=2)
    services.delete_deployment(old)
    return {"embedder": embedder, "chat": chat, "old": old}


def test_the_list_shows_each_deployment_with_its_request_and_nodes(viewer_client, three_deployments):
    body = viewer_client.get("/deployments/").content.decode()
    rows = row_texts(body, "deployment-table")
    assert rows[0] == ("Name Namespace Model Memory GPUs × replicas Priority Sharing Status Placed on Created")
    by_name = {row.split()[0]: row for row in rows[1:]}
    assert set(by_name) == {"embedder", "chat", "old"}
    chat_nodes = sorted({p.node.name for p in three_deployments["chat"].placements.all()})
    assert len(chat_nodes) == 1 and chat_nodes[0].startswith("h100-")  # seed scenario 1: an H100
    assert by_name["chat"].startswith(f"chat ml llama-3-8b 40 GB 1 × 1 High Automatic Placed {chat_nodes[0]}")
    embedder_nodes = sorted({p.node.name for p in three_deployments["embedder"].placements.all()})
    assert f"embedder search llama-3-8b 8 GB 1 × 2 Low Automatic Placed {', '.join(embedder_nodes)}" in by_name["embedder"]
    # A deleted deployment keeps its row and says so; its placements are kept as history.
    assert "Deleted" in by_name["old"]
    assert f'href="/deployments/{three_deployments["chat"].pk}/"' in body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=placed", {"embedder", "chat"}),
        ("status=deleted", {"old"}),
        ("namespace=ml", {"chat", "old"}),
        ("namespace=ml&status=placed", {"chat"}),
        ("status=running", set()),
    ],
)
def test_the_list_filters_by_status_and_namespace(viewer_client, three_deployments, query, expected):
    response = viewer_client.get(f"/deployments/?{query}")
    assert {d.name for d in response.context["deployments"]} == expected
    if not expected:
        assert "No deployments match these filters." in response.content.decode()


def test_an_unknown_filter_value_is_an_error_and_shows_nothing(viewer_client, three_deployments):
    response = viewer_client.get("/deployments/?status=bogus")
    assert response.status_code == 200
    assert list(response.context["deployments"]) == []
    assert "Select a valid choice. bogus is not one of the available choices." in response.content.decode()


def test_the_namespace_filter_offers_the_namespaces_in_use(viewer_client, three_deployments):
    body = viewer_client.get("/deployments/").content.decode()
    select = re.search(r'<select name="namespace".*?</select>', body, re.S).group(0)
    assert re.findall(r'<option value="([^"]*)"', select) == ["", "ml", "search"]
