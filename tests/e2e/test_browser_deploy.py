"""Deploying through the web UI in a real browser: an operator fills the deploy form, lands on the
deployment page and reads the decision matrix, as a table and as plotly's stacked bars.

Runs on the 12-node demo cluster (nodes.demo) in the simulator, in pytest-django's live_server.
Screenshots land in the test's tmp_path (run with `--basetemp DIR` to keep them somewhere known).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import Page, expect

from nodes.demo import load_demo_cluster
from scheduler.models import Deployment
from tests.e2e.accounts import PASSWORD, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OPERATOR_NAME = "otto"


@pytest.fixture
def operator_user() -> User:
    user = User.objects.create_user(OPERATOR_NAME, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return user


@pytest.fixture
def demo_cluster() -> None:
    """The demo's 12 nodes, seeded into this test's simulated cluster state file and synced."""
    load_demo_cluster()


def test_an_operator_deploys_and_reads_the_decision_matrix(
    page: Page, live_server, operator_user, demo_cluster, tmp_path: Path
):
    base = live_server.url
    sign_in(page, base, OPERATOR_NAME)

    page.goto(f"{base}/deployments/")
    expect(page.get_by_text("No deployments yet.")).to_be_visible()
    page.get_by_role("link", name="Deploy", exact=True).click()
    page.wait_for_url(f"{base}/deployments/new/")

    # The seed's scenario 2: an 8 GB low-priority batch job.
    page.get_by_label("Name", exact=True).fill("embedder")
    page.get_by_label("Model", exact=True).fill("bge-large")
    page.get_by_label("Namespace").fill("search")
    page.get_by_label("Workload type").select_option("batch")
    page.get_by_label("GPU memory (GB)").fill("8")
    page.get_by_label("Priority", exact=True).select_option("low")
    page.get_by_label("Labels").fill("team=search")
    expect(page.get_by_role("radio", name="Automatic", exact=True)).to_be_checked()
    expect(page.get_by_label("Let gpuplane choose the node and GPUs")).to_be_checked()
    page.screenshot(path=tmp_path / "deploy-form.png", full_page=True)
    page.get_by_role("button", name="Deploy", exact=True).click()

    page.wait_for_url(re.compile(rf"{re.escape(base)}/deployments/\d+/$"))
    deployment = Deployment.objects.get()
    placement = deployment.placements.get()
    node = placement.node.name
    expect(page.locator(".message--success")).to_contain_text(f"Deployed search/embedder: placed on {node}")
    expect(page.locator("#deployment-status")).to_have_text("Placed")

    # Placements: an A100 at 50 % MPS.
    placement_row = page.locator("#placement-table tbody tr")
    expect(placement_row).to_have_count(1)
    expect(placement_row).to_contain_text(node)
    expect(placement_row).to_contain_text("A100-SXM4-40GB")
    expect(placement_row).to_contain_text("50 %")

    # The matrix: the chosen node highlighted with its total; rejected nodes listed with a reason.
    matrix = deployment.decisions.get().matrix
    chosen = page.locator('[data-matrix-table] tr[data-verdict="chosen"]')
    expect(chosen).to_have_count(1)
    expect(chosen).to_have_attribute("data-node", node)
    stored = next(row for row in matrix["rows"] if row["node"] == node)
    expect(chosen.locator("[data-total]")).to_have_text(f"{stored['total']:.1f}")
    expect(chosen).to_contain_text("chosen")
    rejected = page.locator('[data-matrix-table] tr[data-verdict="rejected"]')
    stored_rejected = [row for row in matrix["rows"] if not row["feasible"]]
    expect(rejected).to_have_count(len(stored_rejected))
    for i, row in enumerate(stored_rejected):
        expect(rejected.nth(i)).to_contain_text(row["reason"])
    assert len(stored_rejected) > 0
    expect(page.locator(".weights")).to_contain_text("Power efficiency × 0.30")
    # Raw values in words with their units (the power-efficiency column, wherever the weights sort it).
    expect(chosen.locator(".matrix__raw").filter(has_text="TFLOPS per kW")).to_have_count(1)

    # The chart: one stacked trace per plugin, one bar per charted node, the chosen node on top.
    chart = page.locator("[data-decision-chart]")
    plugins = len(matrix["weights"])
    feasible = sum(1 for row in matrix["rows"] if row["feasible"])
    expect(chart.locator(".barlayer .trace")).to_have_count(plugins)
    expect(chart.locator(".barlayer .point")).to_have_count(plugins * min(10, feasible))
    expect(chart.locator(".legend .legendtext").filter(has_text="Power efficiency × 0.30")).to_have_count(1)
    first_tick = chart.locator(".yaxislayer-above .ytick text").first
    expect(first_tick).to_contain_text(node)
    expect(first_tick).to_contain_text("✓")
    page.screenshot(path=tmp_path / "deployment.png", full_page=True)

    # On a phone-sized screen the chart is redrawn to fit and the table scrolls inside its box.
    page.set_viewport_size({"width": 420, "height": 900})
    page.wait_for_function(
        "() => document.querySelector('[data-decision-chart] .main-svg').getBoundingClientRect().width <= 420"
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= 420
    page.screenshot(path=tmp_path / "deployment-narrow.png", full_page=True)
    page.set_viewport_size({"width": 1360, "height": 900})

    # Back on the list, the new deployment is a row with its node.
    page.get_by_role("link", name="Deployments", exact=True).first.click()
    row = page.locator("#deployment-table tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("embedder")
    expect(row).to_contain_text(node)
    page.screenshot(path=tmp_path / "deployments.png", full_page=True)


def test_a_request_that_fits_nowhere_shows_why_and_stores_nothing(
    page: Page, live_server, operator_user, demo_cluster, tmp_path: Path
):
    base = live_server.url
    sign_in(page, base, OPERATOR_NAME)
    page.goto(f"{base}/deployments/new/")
    page.get_by_label("Name", exact=True).fill("huge")
    page.get_by_label("Model", exact=True).fill("llama-3-405b")
    page.get_by_label("GPU memory (GB)").fill("200")
    page.get_by_role("radio", name="Exclusive", exact=True).check()
    page.get_by_role("button", name="Deploy", exact=True).click()

    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Nothing fits this request; nothing was deployed")
    expect(alert).to_contain_text("No GPU of this cluster can hold 200 GB")
    expect(alert).to_contain_text("0/12 nodes are available: 12 nodes have insufficient GPU memory")
    expect(alert.locator("[data-suggestion]")).to_contain_text("ask for 3 GPUs per replica (66.7 GB on each)")
    expect(alert.locator("#rejection-table tbody tr").first).to_contain_text("insufficient GPU memory")
    expect(page.get_by_label("Name", exact=True)).to_have_value("huge")
    expect(page.get_by_role("radio", name="Exclusive", exact=True)).to_be_checked()
    page.screenshot(path=tmp_path / "no-capacity.png", full_page=True)
    assert not Deployment.objects.exists()

    # The suggested change, applied by its button, deploys the same request with 3 GPUs.
    alert.get_by_role("button", name="Deploy with this change").click()
    expect(page).to_have_url(re.compile(r"/deployments/\d+/$"))
    deployment = Deployment.objects.get()
    assert (deployment.name, deployment.gpu_count, deployment.sharing) == ("huge", 3, "exclusive")
