"""KubernetesCluster at the HTTP level: lists with resourceVersions, watches from one, and 410 Gone.

The watch goes through the official client's `kubernetes.watch.Watch().stream`; the fake API
server answers it as the API server does, with one JSON event per line.
"""
from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nodes.cluster.base import ResourceVersionGone
from nodes.inventory import watching
from nodes.inventory.sync import sync_inventory
from nodes.models import InventoryWatch, Node
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import RecordedRequest, Reply


def _versioned(obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = version
    return obj


def _stream(*events: dict[str, Any]) -> Reply:
    return Reply(200, b"".join(json.dumps(event).encode() + b"\n" for event in events))


def _gone() -> dict[str, Any]:
    return {"type": "ERROR", "object": k8s.status_error(410, "Expired", "too old resource version: 100 (184000)")}


def test_lists_carry_the_list_and_object_resource_versions(kube, cluster):
    kube.on("GET", "/api/v1/nodes", k8s.list_object("Node", [_versioned(k8s.gpu_node("gpu-node-1"), "184321")]))

    listing = cluster.list_nodes_versioned()

    assert listing.resource_version == "184500"  # the list's, from its metadata
    assert listing.items[0].resource_version == "184321"  # the object's own


def test_a_watch_reads_the_events_after_a_version_through_the_clients_watch(kube, cluster):
    changed = _versioned(k8s.gpu_node("gpu-node-1", unschedulable=True), "184600")
    kube.on("GET", "/api/v1/nodes", handler=lambda request: _stream(
        {"type": "MODIFIED", "object": changed},
        {"type": "DELETED", "object": _versioned(k8s.gpu_node("gpu-node-2"), "184601")},
        {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "184700"}}},
    ))

    changes = cluster.watch_nodes("184500", timeout_s=2)

    request = kube.only_request()
    assert request.param("watch") == "true" and request.param("resourceVersion") == "184500"
    assert request.param("timeoutSeconds") == "2" and request.param("allowWatchBookmarks") == "true"
    assert [(e.type, e.key) for e in changes.events] == [("MODIFIED", "gpu-node-1"), ("DELETED", "gpu-node-2")]
    assert changes.events[0].item is not None and changes.events[0].item.unschedulable is True
    assert changes.events[1].item is None
    assert changes.resource_version == "184700"  # the bookmark moves it past the last event


@pytest.mark.parametrize("as_status", [False, True], ids=["error event", "http 410"])
def test_a_too_old_version_is_resource_version_gone(kube, cluster, as_status):
    if as_status:
        kube.on("GET", "/api/v1/nodes", k8s.status_error(410, "Expired", "too old resource version"), status=410)
    else:
        kube.on("GET", "/api/v1/nodes", handler=lambda request: _stream(_gone()))

    with pytest.raises(ResourceVersionGone, match="410"):
        cluster.watch_nodes("100", timeout_s=1)


@pytest.mark.django_db
def test_inventory_sync_lists_then_watches_then_relists_on_gone(kube, cluster):
    watching.forget_mirrors()
    answers = {"watch": [_stream()]}  # the queue of watch answers, then quiet ones

    def nodes(request: RecordedRequest) -> Reply:
        if request.param("watch") != "true":
            return Reply(200, k8s.list_object("Node", [_versioned(k8s.gpu_node("gpu-node-1"), "184321")]))
        return answers["watch"].pop(0) if answers["watch"] else _stream()

    kube.on("GET", "/api/v1/nodes", handler=nodes)
    kube.on("GET", "/api/v1/pods", handler=lambda request: _stream() if request.param("watch") == "true"
            else Reply(200, k8s.list_object("Pod", [])))

    assert sync_inventory(cluster).mode == "relist"
    assert sync_inventory(cluster).mode == "watch"
    answers["watch"] = [_stream({"type": "MODIFIED", "object": _versioned(
        k8s.gpu_node("gpu-node-1", unschedulable=True), "184900")})]
    watched = sync_inventory(cluster)
    assert watched.mode == "watch" and watched.updated["nodes"] == 1
    assert Node.objects.get(name="gpu-node-1").cordoned is True

    answers["watch"] = [_stream(_gone())]
    relisted = sync_inventory(cluster)  # the list says uncordoned again (rv 184321 differs from the mirror's)
    assert relisted.mode == "relist" and relisted.updated["nodes"] == 1
    assert Node.objects.get(name="gpu-node-1").cordoned is False
    lists = [r for r in kube.requests if r.path == "/api/v1/nodes" and r.param("watch") != "true"]
    assert len(lists) == 2  # the first sync and the one after 410 Gone


@pytest.mark.django_db
def test_a_watch_that_brings_only_a_bookmark_writes_nothing_and_keeps_the_stored_versions(kube, cluster):
    watching.forget_mirrors()
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "190000"}}}
    kube.on("GET", "/api/v1/nodes", handler=lambda request: _stream(bookmark) if request.param("watch") == "true"
            else Reply(200, k8s.list_object("Node", [_versioned(k8s.gpu_node("gpu-node-1"), "184321")])))
    kube.on("GET", "/api/v1/pods", handler=lambda request: _stream() if request.param("watch") == "true"
            else Reply(200, k8s.list_object("Pod", [])))
    sync_inventory(cluster)

    with CaptureQueriesContext(connection) as queries:
        report = sync_inventory(cluster)
    sync_inventory(cluster)

    assert report.mode == "watch" and report.events == 0
    assert not [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
    assert InventoryWatch.objects.get().nodes_version == "184500"  # the list's, not the bookmark's
    watches = [r.param("resourceVersion") for r in kube.requests if r.path == "/api/v1/nodes" and r.param("watch") == "true"]
    assert watches == ["184500", "184500"]
