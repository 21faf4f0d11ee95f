"""A webhook-placed pod: visible with its decision matrix, running once bound, released when its
pod goes away and when it never binds within GPUPLANE_WEBHOOK_BIND_TIMEOUT_S (must-show 5)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from nodes.cluster.base import ClusterPod
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment
from scheduler.pod_patch import apply_patch
from scheduler.services import sweep_deployments, watch_deployment
from tests.scheduler.admission.reviews import admission_review, gpu_pod, patch_of, post
from tests.scheduler.inventory import capacity_state, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db


class Pods:
    """A cluster as the watch sees it: the GPU pods it lists, set by the test."""

    def __init__(self) -> None:
        self.pods: list[ClusterPod] = []

    def list_gpu_pods(self) -> list[ClusterPod]:
        return list(self.pods)


@pytest.fixture
def admitted(viewer):
    demo_cluster()
    before = capacity_state()
    pod = gpu_pod(labels={"gpuplane.io/workload-type": "training"})
    _, answer = post(Client(), admission_review(pod))
    patched = apply_patch(pod, patch_of(answer))
    deployment = Deployment.objects.get(origin="webhook")
    return deployment, patched, before


def cluster_pod(patched, *, node="", phase="Pending") -> ClusterPod:
    meta = patched["metadata"]
    return ClusterPod(namespace=meta["namespace"], name=meta["name"], node_name=node, phase=phase, ready=phase == "Running",
                      labels=meta["labels"], annotations=meta["annotations"], gpu_requests={"nvidia.com/gpu": 1})


def test_it_shows_in_the_api_and_ui_with_its_matrix(admitted, viewer):
    deployment, _, _ = admitted
    client = Client()
    client.force_login(viewer)
    decision = client.get(f"/api/v1/deployments/{deployment.pk}/decision/")
    assert decision.status_code == 200
    assert "training takes whole GPUs" in str(deployment.message)
    page = client.get(f"/deployments/{deployment.pk}/")
    html = page.content.decode()
    assert page.status_code == 200 and deployment.name in html and 'id="deployment-origin"' in html
    assert "Decision" in html and deployment.placements.get().node.name in html


def test_it_runs_once_bound_and_is_released_when_its_pod_goes_away(admitted):
    deployment, patched, before = admitted
    node = deployment.placements.get().node.name
    cluster = Pods()
    cluster.pods = [cluster_pod(patched, node=node, phase="Running")]
    assert watch_deployment(deployment.pk, cluster=cluster) == "running"
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING
    assert deployment.placements.get().status == PlacementStatus.RUNNING

    cluster.pods = []  # kubectl delete pod
    assert sweep_deployments(timezone.now() + timedelta(minutes=1), cluster=cluster) == {deployment.pk: "released"}
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.DELETED and "went away" in deployment.message
    assert capacity_state() == before
    check_invariants()


def test_a_pod_that_never_binds_is_released_after_the_bind_timeout(admitted, settings):
    deployment, patched, before = admitted
    cluster = Pods()
    cluster.pods = [cluster_pod(patched)]  # stored, never scheduled
    soon = timezone.now() + timedelta(seconds=settings.GPUPLANE_WEBHOOK_BIND_TIMEOUT_S - 5)
    assert watch_deployment(deployment.pk, cluster=cluster, now=soon) == "waiting"
    assert capacity_state() != before
    late = timezone.now() + timedelta(seconds=settings.GPUPLANE_WEBHOOK_BIND_TIMEOUT_S + 5)
    assert watch_deployment(deployment.pk, cluster=cluster, now=late) == "released"
    deployment.refresh_from_db()
    assert "did not bind" in deployment.message
    assert capacity_state() == before


def test_a_pod_the_api_server_never_stored_is_released_too(admitted, settings):
    deployment, _, before = admitted
    late = timezone.now() + timedelta(seconds=settings.GPUPLANE_WEBHOOK_BIND_TIMEOUT_S + 5)
    assert watch_deployment(deployment.pk, cluster=Pods(), now=late) == "released"
    assert capacity_state() == before
