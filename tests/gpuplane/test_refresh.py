"""nodes.fleet.refresh_per_poll: after a poll the overview, the node map and /metrics show the new
readings at once, computed before any request asks, and every page still agrees with the others."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from nodes.fleet import refresh_per_poll
from nodes.models import GPU
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def _shown(viewer_client: Client, client: Client) -> tuple[float, float, float]:
    """Mean utilization on the overview's card, the node map's tile and /metrics' node series."""
    overview = viewer_client.get("/").context["overview"].mean_utilization_pct
    tile = viewer_client.get("/api/v1/heatmap/").json()["nodes"][0][4]
    metrics = {
        sample.name: sample.value
        for family in text_string_to_metric_families(client.get("/metrics").content.decode())
        for sample in family.samples
        if sample.labels.get("node") == "n1"
    }
    return overview, tile, metrics["gpuplane_node_utilization_percent"]


def test_a_refresh_puts_the_new_readings_on_every_page_before_any_request(viewer_client, client):
    make_node("n1", gpu_count=2)
    GPU.objects.update(utilization_pct=10.0)
    assert _shown(viewer_client, client) == (10.0, 10.0, 10.0)
    GPU.objects.update(utilization_pct=90.0)  # a poll stores new telemetry (no audit event)
    assert _shown(viewer_client, client) == (10.0, 10.0, 10.0)  # within the interval: the cache

    refresh_per_poll()  # what the poll task does after storing

    with CaptureQueriesContext(connection) as queries:
        assert _shown(viewer_client, client) == (90.0, 90.0, 90.0)
    # Computed by the refresh: no request read the GPU or partition tables.
    assert not [q["sql"] for q in queries if "nodes_gpu" in q["sql"] or "nodes_partition" in q["sql"]]
