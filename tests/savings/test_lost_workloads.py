"""Issue 18, must-show 5: the savings fall, not rise, when a workload is lost, and say what they leave out.

A replica is moved the way issue 18 lost one: its replacement is placed on another node (sharing a
GPU with another workload there) but its pod never becomes ready, and the original is evicted
anyway. Counting the replacement as if it ran would put it on the shared GPU, free the original's
GPU and raise "saved" by one; the savings count only replicas that run, so "saved" does not rise,
and the baseline's drop is named (``not_running``), not silent.
"""
from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.test import Client

from nodes.contract import LABEL_DEPLOYMENT
from nodes.inventory.sync import sync_inventory
from savings.services.current import current_savings
from savings.services.not_running import not_running
from scheduler.models import Deployment, Placement
from scheduler.services.placing import next_replica_index, place_replicas, release_replica
from scheduler.services.spec import spec_of
from scheduler.services.watching import watch_deployment
from tests.rollouts.simulated import MPS_4, mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_nodes():
    """Two one-GPU MPS R=4 nodes, one quarter-GPU deployment running on each: 2 baseline, 2 used."""
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=2, start=MPS_4)
    for deployment in Deployment.objects.all():
        assert watch_deployment(deployment.pk, cluster=cluster) == "running"
    return clock, cluster


def savings_now(cluster) -> tuple[int, int, int]:
    sync_inventory(cluster)
    savings = current_savings(refresh=True)
    return savings.baseline_gpus, savings.gpus_used, savings.gpus_saved


def lose_a_replica(clock: FakeClock, cluster) -> Deployment:
    """Move svc-1 next to svc-2: the replacement's pod runs but never passes its readiness probe,
    and the original is evicted all the same."""
    lost = Deployment.objects.get(name="svc-1")
    original = lost.placements.get()
    target = Placement.objects.get(deployment__name="svc-2").node.name
    spec = replace(spec_of(lost), allow_default_scheduler=False)
    [replacement] = place_replicas(lost, [next_replica_index(lost)], spec=spec, user="test", cluster=cluster,
                                   nodes=[target])
    clock.advance(3)
    [pod] = [p for p in cluster.list_gpu_pods() if p.labels.get(LABEL_DEPLOYMENT) == str(lost.pk) and p.node_name == target]
    cluster.set_pod_ready(pod.namespace, pod.name, False)
    [gone] = [p for p in cluster.list_gpu_pods() if p.labels.get(LABEL_DEPLOYMENT) == str(lost.pk) and p.node_name != target]
    cluster.evict_pod(gone.namespace, gone.name)
    release_replica(lost, original.replica_index, user="test", cluster=cluster, reason="moved (issue 18's loss)")
    assert watch_deployment(lost.pk, cluster=cluster, now=datetime.fromtimestamp(clock.now, UTC)) != "running"
    assert Placement.objects.get(pk=replacement.pk).status == "binding"  # holding its slot, not serving
    return lost


def test_losing_a_workload_never_raises_the_savings_and_the_baseline_drop_is_said(two_nodes, viewer_api):
    clock, cluster = two_nodes
    assert savings_now(cluster) == (2, 2, 0)
    assert not_running(refresh=True).replicas == 0

    lost = lose_a_replica(clock, cluster)

    baseline, used, saved = savings_now(cluster)
    assert saved <= 0, "a replica that does not run saved nothing"  # counted as running, it would be 1
    assert (baseline, used) == (1, 1)  # svc-2 alone on its GPU
    left_out = not_running(refresh=True)
    assert (left_out.replicas, left_out.baseline_gpus) == (1, 1)
    assert left_out.deployments == [{"deployment": lost.pk, "workload": "default/svc-1", "missing": 1, "gpus": 1}]
    body = viewer_api.get("/api/v1/savings/").json()
    assert (body["baseline_gpus"], body["gpus_saved"]) == (1, 0)
    assert body["not_running"]["replicas"] == 1 and body["not_running"]["deployments"][0]["workload"] == "default/svc-1"


def test_the_savings_page_says_which_replicas_are_left_out(two_nodes, viewer):
    clock, cluster = two_nodes
    lose_a_replica(clock, cluster)
    sync_inventory(cluster)
    current_savings(refresh=True)
    not_running(refresh=True)

    client = Client()
    client.force_login(viewer)
    page = " ".join(re.sub(r"<[^>]+>", "", client.get("/savings/").content.decode()).split())

    assert "1 gpuplane replica should run and does not (lost, or still starting): left out of the baseline (1 whole GPU)" in page
    assert "default/svc-1: 1 replica not running" in page


def test_a_replica_that_comes_back_counts_again(two_nodes):
    clock, cluster = two_nodes
    lost = lose_a_replica(clock, cluster)
    [pod] = [p for p in cluster.list_gpu_pods() if p.labels.get(LABEL_DEPLOYMENT) == str(lost.pk)]
    cluster.set_pod_ready(pod.namespace, pod.name, True)
    watch_deployment(lost.pk, cluster=cluster, now=datetime.fromtimestamp(clock.now, UTC))

    # Both now share one GPU: the saving is real once both run.
    assert savings_now(cluster) == (2, 1, 1)
    assert not_running(refresh=True).replicas == 0
