"""Must-show 5: an operator starts a rolling update on the demo cluster from the UI and watches it
reach 100 % while the deployments on those nodes stay served.

The demo cluster is the one `make run` seeds (`load_demo_cluster --if-empty`). Two gpuplane
deployments run on the demo's MPS R=2 nodes; the operator creates "MPS R=4 on both" in the form
(preview, create) and presses Start. The test then plays Celery's part: each tick runs the rollout
reconciler and the deployment watch, as beat and the worker would, and between ticks a checker reads
every one of those deployments through the REST API (status, running replicas) and counts its ready
pods in the cluster: every one reads "running" at every tick, gaining its pre-warmed copy included
(scheduler.services.placing keeps a deployment whose desired replicas all run "running" while a copy
starts). The demo's own pods on those nodes have ReplicaSet owners: evicted, they come back elsewhere
(the simulator's ReplicaSet controller). The page is never reloaded: its progress, status and event
log (with the nodes' events) change by its own polling.
A viewer watches the same page, without a Start button, and the API refuses her a start (403).
"""
from __future__ import annotations

import re
import time
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db.models import Q
from playwright.sync_api import APIResponse, Browser, Page, expect

from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_APP_NAME, LABEL_DEPLOYMENT, LABEL_GPU_REPLICAS, RESOURCE_GPU
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from rollouts.choices import NodeState, RolloutStatus
from rollouts.models import RollingUpdate
from rollouts.reconciler import reconcile
from scheduler import services
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment
from scheduler.services import DeploySpec
from scheduler.services.moving import advance_moves
from scheduler.services.watching import watch_deployment
from tests.e2e.accounts import PASSWORD, VIEWER_NAME, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OPERATOR_NAME = "otto"
TARGETS = ("a100-node-1", "a100-node-3")  # the demo's MPS R=2 nodes
TICK_S = 0.05  # real seconds between reconciler ticks (the simulator runs on the wall clock)
POD_READY_S = 0.5


@pytest.fixture
def operator_user() -> User:
    user = User.objects.create_user(OPERATOR_NAME, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return user


@pytest.fixture
def demo(isolated_cluster_state: str) -> SimulatedCluster:
    """The demo cluster as `make run` seeds it, with one running gpuplane deployment (a 25 % MPS
    replica) on each target node: the other nodes are cordoned while it is placed, as an operator
    would steer it, then opened again."""
    call_command("load_demo_cluster", "--if-empty", stdout=StringIO())
    cluster = SimulatedCluster(isolated_cluster_state, pod_ready_delay_s=POD_READY_S)
    names = [n.name for n in cluster.list_nodes()]
    for number, target in enumerate(TARGETS, start=1):
        for name in names:
            (cluster.uncordon if name == target else cluster.cordon)(name)
        sync_inventory(cluster)
        deployment = services.deploy(DeploySpec(name=f"chat-{number}", model="m", memory_gb=8, sharing="mps",
                                                share_percent=25), cluster=cluster)
        assert deployment.placements.get().node.name == target
    for name in names:
        cluster.uncordon(name)
    time.sleep(POD_READY_S + 0.2)
    for deployment in Deployment.objects.all():
        assert watch_deployment(deployment.pk, cluster=cluster) == "running"
    sync_inventory(cluster)
    return cluster


def ready_pods(cluster: SimulatedCluster) -> Counter[str]:
    return Counter(pod.labels[LABEL_DEPLOYMENT] for pod in cluster.list_gpu_pods()
                   if pod.ready and LABEL_DEPLOYMENT in pod.labels)


def tick(cluster: SimulatedCluster) -> None:
    """What Celery does on the server: a reconciler tick (beat), then the watch of every deployment
    being started or starting a replica (the worker's watch task)."""
    reconcile(cluster=cluster)
    advance_moves(cluster=cluster)  # the mover's beat task: the rollout's moves
    starting = Q(status=DeploymentStatus.PLACED) | Q(placements__status=PlacementStatus.BINDING)
    for pk in Deployment.objects.filter(starting).distinct().values_list("pk", flat=True):
        watch_deployment(pk, cluster=cluster)


def csrf_post(page: Page, url: str) -> APIResponse:
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    return page.request.post(url, headers={"X-CSRFToken": token, "Content-Type": "application/json"}, data="{}")


def test_an_operator_starts_a_rollout_on_the_demo_cluster_and_watches_it_finish_while_deployments_stay_served(
    page: Page, chromium: Browser, live_server, operator_user, viewer_user, demo, tmp_path: Path, monkeypatch
):
    monkeypatch.setattr("rollouts.views.POLL_SECONDS", 1)  # the page polls every second, not every 3
    base = live_server.url
    watched = {str(pk): replicas for pk, replicas in Deployment.objects.values_list("pk", "replicas")}
    assert len(watched) == 2
    # The demo's own pods on the target nodes (other teams', ReplicaSet-owned): evicted, they come back.
    theirs = {pod.key: pod.labels[LABEL_APP_NAME] for pod in demo.list_gpu_pods()
              if pod.node_name in TARGETS and LABEL_DEPLOYMENT not in pod.labels}
    assert len(theirs) == 3

    # The operator creates the rollout in the form: preview first, then create.
    sign_in(page, base, OPERATOR_NAME)
    page.goto(f"{base}/rollouts/new/")
    page.get_by_label("Name", exact=True).fill("mps-r4")
    for name in TARGETS:
        page.get_by_role("checkbox", name=re.compile(rf"^{name} \(")).check()
    page.get_by_label("Sharing mode").select_option("mps")
    page.get_by_label("Replicas").fill("4")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#preview-verdict")).to_contain_text("Safe to create")
    expect(page.locator("#preview-batches tbody tr")).to_have_count(2)  # max unavailable 1: a node a batch
    page.screenshot(path=tmp_path / "demo-rollout-preview.png", full_page=True)
    page.get_by_role("button", name="Create rollout").click()
    page.wait_for_url(re.compile(rf"{re.escape(base)}/rollouts/\d+/$"))
    rollout = RollingUpdate.objects.get()
    detail = f"{base}/rollouts/{rollout.pk}/"
    api = f"{base}/api/v1/rollouts/{rollout.pk}/"
    expect(page.locator("#rollout-status")).to_have_text("Pending")

    # A viewer watches the same page: no Start button, and the API refuses her a start.
    viewer_context = chromium.new_context(viewport={"width": 1360, "height": 900})
    viewer_page = viewer_context.new_page()
    try:
        sign_in(viewer_page, base, VIEWER_NAME)
        viewer_page.goto(detail)
        expect(viewer_page.locator("#rollout-progress")).to_have_text("0.0 %")
        expect(viewer_page.get_by_role("button", name="Start")).to_have_count(0)
        refused = csrf_post(viewer_page, f"{api}start/")
        assert refused.status == 403, refused.text()
        assert refused.json()["detail"] == "Your role does not allow this."  # the role, not a CSRF refusal

        # The operator presses Start; from here on neither page is reloaded.
        page.evaluate("window.notReloaded = true")
        viewer_page.evaluate("window.notReloaded = true")
        page.get_by_role("button", name="Start").click()
        expect(page.locator("#action-result")).to_have_text("start: done.")
        rollout.refresh_from_db()
        assert rollout.status == RolloutStatus.RUNNING

        samples = 0
        halfway_shot = False
        for _ in range(400):
            tick(demo)
            samples += 1
            ready = ready_pods(demo)
            for pk, replicas in watched.items():
                body = page.request.get(f"{base}/api/v1/deployments/{pk}/").json()
                running = [p for p in body["placements"] if p["status"] == "running"]
                # Running at every tick: gaining a pre-warmed copy does not make it "placed".
                assert body["status"] == "running", body
                assert len(running) >= replicas, f"{body['name']}: {len(running)} running replica(s)"
                assert ready[pk] >= replicas, f"{body['name']} had {ready[pk]} ready pod(s)"
            rollout.refresh_from_db()
            if rollout.status != RolloutStatus.RUNNING:
                break
            done = rollout.nodes.filter(state=NodeState.SUCCEEDED).count()
            if done == 1 and not halfway_shot:
                # The page catches up by itself (it polls every few seconds) while the rollout waits.
                expect(page.locator("#rollout-progress")).to_have_text("50.0 %")
                page.screenshot(path=tmp_path / "demo-rollout-halfway.png", full_page=True)
                halfway_shot = True
            time.sleep(TICK_S)

        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
        assert halfway_shot and samples > 10
        for watching in (page, viewer_page):
            expect(watching.locator("#rollout-progress")).to_have_text("100.0 %")
            expect(watching.locator("#rollout-status")).to_have_text("Succeeded")
            for name in TARGETS:
                row = watching.locator(f'#rollout-nodes tr[data-node="{name}"]')
                expect(row).to_contain_text("succeeded")
                expect(row.locator(".meter__text")).to_have_text("100 %")
            assert watching.evaluate("window.notReloaded") is True
        expect(page.get_by_role("button", name="Pause")).to_be_hidden()
        log = page.locator("#rollout-events tbody")
        expect(log).to_contain_text("rollingupdate.succeeded")
        # The nodes' events too, each with its node: evictions, the label switch.
        for verb in ("rolloutnode.pod_evicted", "rolloutnode.labels_switched", "rolloutnode.succeeded"):
            for name in TARGETS:
                expect(log.locator("tr", has_text=verb).filter(has_text=name).first).to_be_visible()
        page.screenshot(path=tmp_path / "demo-rollout-done.png", full_page=True)
        viewer_page.screenshot(path=tmp_path / "demo-rollout-viewer.png", full_page=True)
    finally:
        viewer_context.close()

    # The nodes run the new config, proven by the cluster; the deployments still run.
    for node in demo.list_nodes():
        if node.name in TARGETS:
            assert node.labels[LABEL_GPU_REPLICAS] == "4" and not node.unschedulable
            assert node.allocatable[RESOURCE_GPU] == 4 * len(node.gpus)
    assert set(Node.objects.filter(name__in=TARGETS).values_list("sharing_replicas", flat=True)) == {4}
    assert set(Deployment.objects.values_list("status", flat=True)) == {DeploymentStatus.RUNNING}
    assert AuditEvent.objects.filter(verb="rolloutnode.pod_evicted").exists()
    # The demo's pods were evicted and recreated by their ReplicaSets elsewhere, each ready again.
    time.sleep(POD_READY_S + 0.2)
    now = [pod for pod in demo.list_gpu_pods() if LABEL_DEPLOYMENT not in pod.labels]
    assert not set(theirs) & {pod.key for pod in now}
    back = Counter(pod.labels.get(LABEL_APP_NAME) for pod in now if pod.ready and pod.key not in theirs)
    assert all(back[app] >= count for app, count in Counter(theirs.values()).items()), back
