"""Fleet pages at scale (nodes/fleet.py): the overview's node map, `/api/v1/heatmap/` and /metrics
cost O(nodes), not O(GPUs), and are kept for one poll interval unless the inventory changes."""
from __future__ import annotations

import json
import re
from datetime import timedelta
from fractions import Fraction

import pytest
from django.core.cache import caches
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.synthetic_fleet import make_fleet
from lifecycle.audit import record
from nodes.fleet import cached_per_poll, node_tiles
from nodes.models import GPU, Node
from tests.nodes.factories import make_node, make_partition

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def tiles_by_name(payload: dict) -> dict[str, dict]:
    return {row[0]: dict(zip(payload["columns"], row, strict=True)) for row in payload["nodes"]}


def test_node_tiles_aggregate_each_nodes_gpus_in_three_queries(django_assert_num_queries):
    b = make_node("b", gpu_count=2, partitions=False)
    make_node("a", gpu_count=1, cordoned=True)
    make_node("no-gpus", gpu_count=0)
    GPU.objects.filter(uuid="GPU-b-0").update(utilization_pct=20.0, power_w=300.0, allocated_milli=1000)
    GPU.objects.filter(uuid="GPU-b-1").update(utilization_pct=51.0, power_w=450.5)
    # An occupied 3g MIG instance counts 3/7, not its stored 428 thousandths (as the node list does).
    make_partition(b.gpus.get(index=1), "mig", 1, 428, 40960, mig_profile="3g.40gb", mig_start=0, mig_size=4, pod="ml/x")
    GPU.objects.filter(uuid="GPU-b-1").update(allocated_milli=428)

    with django_assert_num_queries(3):
        payload = node_tiles()

    tiles = tiles_by_name(payload)
    assert list(tiles) == ["a", "b"]  # by name; a node without GPUs has no tile
    assert tiles["b"] == {
        "name": "b", "state": "ready", "gpus": 2, "reporting": 2, "utilization_pct": 35.5, "power_w": 750.5,
        "allocated": round(float(1 + Fraction(3, 7)), 2),
    }
    assert tiles["a"]["state"] == "cordoned"
    assert (tiles["a"]["reporting"], tiles["a"]["utilization_pct"], tiles["a"]["power_w"]) == (0, None, None)
    assert (payload["gpus"], payload["reporting_gpus"]) == (3, 2)
    assert payload["node_url"] == "/nodes/{name}/"


def test_the_cache_keeps_a_result_for_one_poll_interval_until_the_inventory_changes(settings):
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert cached_per_poll("probe", compute) == 1
    assert cached_per_poll("probe", compute) == 1  # within the interval: not recomputed
    assert cached_per_poll("probe", compute, "other-threshold") == 2  # another variant, its own entry
    node = make_node("n1", gpu_count=1)
    record("node.cordoned", node)  # every change of inventory writes an audit event
    assert cached_per_poll("probe", compute) == 3


def test_the_cache_entry_lives_one_poll_interval(settings, monkeypatch):
    settings.TELEMETRY_POLL_INTERVAL_S = 17
    timeouts: list[float] = []
    cache = caches["fleet"]
    original = cache.set
    monkeypatch.setattr(cache, "set", lambda key, value, timeout=None: (timeouts.append(timeout), original(key, value, timeout)))

    cached_per_poll("probe", lambda: 1)

    assert timeouts == [17]


def test_telemetry_refreshes_on_the_overview_after_one_poll_interval(viewer_client, settings, monkeypatch):
    make_node("n1", gpu_count=1)
    GPU.objects.update(utilization_pct=10.0)
    first = viewer_client.get("/api/v1/heatmap/").json()
    GPU.objects.update(utilization_pct=90.0)  # a poll stores new telemetry (no audit event)

    assert viewer_client.get("/api/v1/heatmap/").json() == first  # served from the cache
    caches["fleet"].clear()  # what the TTL does after one interval
    assert tiles_by_name(viewer_client.get("/api/v1/heatmap/").json())["n1"]["utilization_pct"] == 90.0


# --- O(nodes), not O(GPUs) --------------------------------------------------------------------


def measure(client, url: str) -> tuple[int, int]:
    """(queries, bytes) of one GET of `url`, on a cold cache."""
    caches["fleet"].clear()
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return len(queries), len(response.content)


PAGES = ("/", "/api/v1/heatmap/", "/metrics")


def fleet_figures(client, nodes: int, gpus_per_node: int) -> dict[str, tuple[int, int]]:
    Node.objects.all().delete()
    make_fleet(nodes, gpus_per_node, sampled_at=timezone.now() - timedelta(seconds=5))
    return {url: measure(client, url) for url in PAGES}


def test_queries_and_page_size_do_not_grow_with_gpus_per_node(viewer_client):
    one = fleet_figures(viewer_client, 200, 1)
    eight = fleet_figures(viewer_client, 200, 8)
    half = fleet_figures(viewer_client, 100, 8)

    for url in PAGES:
        assert eight[url][0] == one[url][0] == half[url][0], (url, one[url], eight[url], half[url])  # queries
        # 8 times the GPUs: within 15 % of the size (digits of bigger sums), not 8 times it.
        assert eight[url][1] < one[url][1] * 1.15, (url, one[url], eight[url])
        # Twice the nodes: about twice the node part of the page (the cards are a fixed part).
        assert eight[url][1] < half[url][1] * 2.2, (url, half[url], eight[url])
    # The node map has one row per node, whatever the GPUs per node (the last fleet: 100 x 8).
    body = viewer_client.get("/").content.decode()
    data = json.loads(re.search(r'<script id="heatmap-data" type="application/json">(.*?)</script>', body, re.S).group(1))
    assert len(data["nodes"]) == 100
    assert data["gpus"] == 800
