"""Autoscaling seen in a real browser (issue 22, must-show 3): a load step on the simulated
cluster scales a deployment from 1 to 5 replicas, each placed with a recorded decision; the load
falls and it scales back after the down window; the deployment page's timeline shows both.

The monitoring rounds run in the test with a controlled clock (``autoscale_all(now=...)``), on the
simulated request stream flattened to 5 req/s times the step's factor.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from scheduler import services
from scheduler.models import Decision, Deployment
from scheduler.services import autoscaling, monitoring
from scheduler.services.autoscaling import autoscale_all
from tests.e2e.accounts import sign_in
from tests.scheduler.inventory import FakeClock, demo_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def set_load(deployment: Deployment, factor: float) -> None:
    deployment.refresh_from_db()
    Deployment.objects.filter(pk=deployment.pk).update(
        autoscale_state={**deployment.autoscale_state, "sim_load_factor": factor})


def test_a_load_step_scales_up_and_back_and_the_page_shows_it(page: Page, live_server, viewer_user, settings,
                                                              monkeypatch, tmp_path: Path):
    settings.AUTOSCALE_METRICS_SOURCE = "simulated"
    monkeypatch.setattr(monitoring, "AZURE_CONV_PER_MINUTE", (300,))
    clock = FakeClock()
    cluster = demo_cluster(clock)
    deployment = services.deploy(services.DeploySpec(name="chat", model="llama-3-8b", memory_gb=16.0,
                                                     sharing="exclusive"), cluster=cluster)
    clock.advance(5)
    services.watch_deployment(deployment.pk, cluster=cluster)
    autoscaling.configure_autoscaling(deployment, user="test", policy="gpuplane",
                                      overrides={"min_replicas": 1, "max_replicas": 5})
    start = timezone.now() - timedelta(hours=1)
    t = 0
    set_load(deployment, 4.4)  # 22 req/s: five A100 replicas' worth
    for _ in range(12):
        autoscale_all(cluster=cluster, now=start + timedelta(seconds=t))
        clock.advance(10)
        services.watch_deployment(deployment.pk, cluster=cluster)
        t += 10
    deployment.refresh_from_db()
    assert deployment.replicas == 5
    assert Decision.objects.filter(deployment=deployment).count() == 5
    set_load(deployment, 0.1)
    for _ in range(80):
        autoscale_all(cluster=cluster, now=start + timedelta(seconds=t))
        clock.advance(10)
        t += 10
        deployment.refresh_from_db()
        if deployment.replicas == 1:
            break
    assert deployment.replicas == 1

    sign_in(page, live_server.url, viewer_user.username)
    page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    rows = page.locator("#scaling-table tbody tr")
    expect(rows.first).to_contain_text("down")  # newest first
    expect(page.locator("#scaling-table")).to_contain_text("up 1 → 5")
    chart = page.locator("[data-scaling-timeline]")
    expect(chart.locator(".main-svg").first).to_be_visible()
    expect(chart.locator(".legend .legendtext").filter(has_text="replicas")).to_have_count(1)
    expect(chart.locator(".legend .legendtext").filter(has_text="requests waiting")).to_have_count(1)
    page.screenshot(path=tmp_path / "scaling.png", full_page=True)
