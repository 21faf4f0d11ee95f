"""Pages read right at 1400 x 900 (issue 23): every column of the decision table, the deployments
list and the rollout page is on screen, not cut off in a scrolled box; MIG occupant names are
readable; the savings charts say something with one sample and label their ticks as times; a
rollout's statuses and counts say what happened.

Screenshots land in the test's tmp_path (run with `--basetemp DIR` to keep them).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone
from playwright.sync_api import Page, expect

from nodes.demo import load_demo_cluster
from rollouts.choices import NodeState, RolloutStatus
from rollouts.models import RollingUpdate, RolloutNode
from savings.services.history import record_sample
from scheduler.demo import load_demo_deployments
from scheduler.models import Deployment
from scheduler.services import DeploySpec, deploy
from tests.e2e.accounts import PASSWORD, VIEWER_NAME, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH, HEIGHT = 1400, 900


@pytest.fixture
def wide_page(chromium) -> Page:
    context = chromium.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def demo() -> None:
    """The demo cluster, its demo deployments, and one deployment with a long name and model."""
    load_demo_cluster()
    load_demo_deployments()
    from django.conf import settings

    from nodes.cluster.sim import SimulatedCluster

    deploy(DeploySpec(name="retrieval-augmented-summariser", model="mistral-7b-instruct-v0.3-awq",
                      memory_gb=8, namespace="research-and-development", sharing="mig"),
           cluster=SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE))
    User.objects.create_user(VIEWER_NAME, password=PASSWORD).groups.add(Group.objects.get_or_create(name="viewer")[0])


def every_column_on_screen(page: Page, table: str) -> None:
    """The table fits its box (nothing scrolled away) and each header cell lies within the viewport."""
    box = page.locator(table)
    expect(box).to_be_visible()
    overflow = box.evaluate("t => { const w = t.closest('.table-wrap') || t.parentElement;"
                            " return [w.scrollWidth, w.clientWidth]; }")
    assert overflow[0] <= overflow[1] + 1, f"{table} is {overflow[0]} px wide in a {overflow[1]} px box"
    for header in box.locator("thead th").all():
        bounds = header.bounding_box()
        assert bounds is not None and bounds["x"] >= 0 and bounds["x"] + bounds["width"] <= WIDTH, header.inner_text()


def test_the_decision_table_and_the_deployments_list_show_every_column(wide_page: Page, live_server, demo,
                                                                          tmp_path: Path):
    page = wide_page
    sign_in(page, live_server.url)
    deployment = Deployment.objects.get(name="retrieval-augmented-summariser")

    page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    page.screenshot(path=tmp_path / "decision.png", full_page=True)
    every_column_on_screen(page, "[data-matrix-table]")
    headers = [text.lower() for text in page.locator("[data-matrix-table] thead th").all_inner_texts()]
    assert any("total" in text for text in headers) and any("partition fit" in text for text in headers), headers

    page.goto(f"{live_server.url}/deployments/")
    page.screenshot(path=tmp_path / "deployments.png", full_page=True)
    every_column_on_screen(page, "#deployment-table")
    expect(page.locator("#deployment-table thead")).to_contain_text("Created")


def test_mig_occupant_names_are_not_clipped(wide_page: Page, live_server, demo, tmp_path: Path):
    page = wide_page
    sign_in(page, live_server.url)
    placement = Deployment.objects.get(name="retrieval-augmented-summariser").placements.get()
    page.goto(f"{live_server.url}/nodes/{placement.node.name}/")
    page.screenshot(path=tmp_path / "node.png", full_page=True)
    occupant = page.locator(".mig__cell", has_text="retrieval-augmented-summariser").first
    expect(occupant).to_be_visible()
    clipped = occupant.evaluate("el => Array.from(el.querySelectorAll('*')).concat([el])"
                                ".some(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow !== 'visible')")
    assert not clipped


def test_the_savings_charts_are_readable_with_one_sample(wide_page: Page, live_server, demo, tmp_path: Path):
    page = wide_page
    record_sample(timezone.now())
    sign_in(page, live_server.url)
    page.goto(f"{live_server.url}/savings/")
    for chart in ("#savings-gpus-chart", "#savings-cost-chart"):
        expect(page.locator(chart)).to_have_class("chart js-plotly-plot")
        # One sample is a point to see, not an empty line.
        assert page.locator(f"{chart} .scatterlayer .point").count() >= 1, chart
        ticks = page.locator(f"{chart} .xtick text").all_text_contents()
        assert ticks and not any("." in tick for tick in ticks), ticks  # "05:27", never "05:27:30.3665"
    page.screenshot(path=tmp_path / "savings.png", full_page=True)


def test_a_rollouts_statuses_and_counts_say_what_happened(wide_page: Page, live_server, demo, tmp_path: Path):
    page = wide_page
    config = {"mode": "mps", "replicas": 4, "mig_layout": None}
    rollout = RollingUpdate.objects.create(name="mps4-everywhere-in-the-serving-pool", config=config,
                                           status=RolloutStatus.ABORTED, message="abort by otto")
    states = [NodeState.SUCCEEDED, NodeState.SKIPPED, NodeState.ROLLED_BACK, NodeState.FAILED, NodeState.PENDING]
    for number, state in enumerate(states, start=1):
        RolloutNode.objects.create(rollout=rollout, node_name=f"a100-node-{number}", batch_index=number, state=state,
                                   reason="a reason long enough to need its own line " * 2)
    sign_in(page, live_server.url)

    page.goto(f"{live_server.url}/rollouts/{rollout.pk}/")
    page.screenshot(path=tmp_path / "rollout.png", full_page=True)
    expect(page.locator("#rollout-status")).to_have_text("Aborted")
    every_column_on_screen(page, "#rollout-nodes")
    # Done: the changed and the skipped node, 2 of 5 (the rolled-back and failed ones are not).
    expect(page.locator("#rollout-progress")).to_have_text("40.0 %")
    counts = {state: page.locator(f'#rollout-counts [data-count="{state}"] strong').inner_text()
              for state in ("succeeded", "skipped", "rolled-back", "failed", "other")}
    assert counts == {"succeeded": "1", "skipped": "1", "rolled-back": "1", "failed": "1", "other": "1"}
    failed_row = page.locator('#rollout-nodes tr[data-node="a100-node-4"]')
    expect(failed_row).not_to_contain_text("100 %")
    expect(failed_row).to_contain_text("stopped")
    expect(page.locator('#rollout-nodes tr[data-node="a100-node-1"]')).to_contain_text("100 %")
    # The live script redraws from the API after its first poll: the same words and counts.
    page.wait_for_function("document.getElementById('rollout-refreshed').textContent !== 'as loaded'", timeout=15_000)
    expect(failed_row).to_contain_text("stopped")
    expect(page.locator("#rollout-status")).to_have_text("Aborted")
    assert page.locator('#rollout-counts [data-count="rolled-back"] strong').inner_text() == "1"

    page.goto(f"{live_server.url}/rollouts/")
    every_column_on_screen(page, "#rollout-table")
    expect(page.locator("#rollout-table")).to_contain_text("Aborted")
