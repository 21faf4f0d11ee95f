"""Creating a rollout through the web UI in a real browser: an operator picks nodes of a small
simulated cluster, previews the dry run, creates it, and watches its live page: a bar per node,
numbers that agree with the API, and the action buttons answering (a refusal is shown).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import Page, expect

from nodes.cluster.sim import SimulatedCluster
from nodes.demo import H100_MEMORY_MIB, H100_PRODUCT
from nodes.inventory.sync import sync_inventory
from rollouts.models import NODE_STATES, ROLLOUT_STATES, RollingUpdate
from tests.e2e.accounts import PASSWORD, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OPERATOR_NAME = "otto"
NODES = ("gpu-a", "gpu-b", "gpu-c")


@pytest.fixture
def operator_user() -> User:
    user = User.objects.create_user(OPERATOR_NAME, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return user


@pytest.fixture
def small_cluster(isolated_cluster_state: str) -> None:
    """Three exclusive H100 x2 nodes in this test's simulated cluster, synced into the inventory."""
    cluster = SimulatedCluster(isolated_cluster_state)
    for name in NODES:
        cluster.add_gpu_node(name, product=H100_PRODUCT, gpu_count=2, gpu_memory_mib=H100_MEMORY_MIB)
    sync_inventory(cluster)


def test_an_operator_previews_creates_and_watches_a_rollout(
    page: Page, live_server, operator_user, small_cluster, tmp_path: Path
):
    base = live_server.url
    sign_in(page, base, OPERATOR_NAME)
    page.get_by_role("link", name="Rollouts", exact=True).click()
    expect(page.get_by_text("No rollouts yet.")).to_be_visible()
    page.get_by_role("link", name="New rollout", exact=True).click()
    page.wait_for_url(f"{base}/rollouts/new/")

    page.get_by_label("Name", exact=True).fill("ts4")
    page.get_by_role("checkbox", name=re.compile(r"gpu-a \(2 × ")).check()
    page.get_by_role("checkbox", name=re.compile(r"gpu-b \(2 × ")).check()
    page.get_by_label("Sharing mode").select_option("timeslice")
    page.get_by_label("Replicas").fill("4")
    page.get_by_role("button", name="Preview").click()

    # The dry run: one node per batch (max unavailable 1); nothing stored yet.
    expect(page.locator("#preview-verdict")).to_contain_text("Safe to create")
    expect(page.locator("#preview-batches tbody tr")).to_have_count(2)
    assert not RollingUpdate.objects.exists()
    page.screenshot(path=tmp_path / "rollout-preview.png", full_page=True)
    page.get_by_role("button", name="Create rollout").click()

    page.wait_for_url(re.compile(rf"{re.escape(base)}/rollouts/\d+/$"))
    rollout = RollingUpdate.objects.get()
    expect(page.locator(".message--success")).to_contain_text("Created rollout ts4")
    rows = page.locator("#rollout-nodes tbody tr")
    expect(rows).to_have_count(2)
    for name in ("gpu-a", "gpu-b"):
        row = page.locator(f'#rollout-nodes tr[data-node="{name}"]')
        expect(row.locator(".node-bar")).to_have_count(1)
        expect(row).to_contain_text("pending")
    # The live script has read the API and redrawn the page from it.
    expect(page.locator("#rollout[data-refreshed]")).to_have_count(1)
    api = page.request.get(f"{base}/api/v1/rollouts/{rollout.pk}/").json()
    expect(page.locator("#rollout-progress")).to_have_text(f"{api['progress_percent']:.1f} %")
    expect(page.locator("#rollout-status")).to_have_text("Pending")
    expect(page.locator("#rollout-events tbody")).to_contain_text("rollingupdate.created")

    # The rollout moves on the server (as the reconciler moves it): the page follows within a poll.
    step = rollout.nodes.get(node_name=api["nodes"][0]["node"])
    assert ROLLOUT_STATES.move(rollout, "running", reason="started")
    for state in ("prewarming", "draining", "reconfiguring", "verifying", "succeeded"):
        assert NODE_STATES.move(step, state)
    expect(page.locator("#rollout-status")).to_have_text("Running")
    expect(page.locator("#rollout-progress")).to_have_text("50.0 %")
    expect(page.locator(f'#rollout-nodes tr[data-node="{step.node_name}"]')).to_contain_text("succeeded")
    expect(page.locator(f'#rollout-nodes tr[data-node="{step.node_name}"] .meter__text')).to_have_text("100 %")
    expect(page.get_by_role("button", name="Start")).to_be_hidden()

    # Pause answers: done where the endpoint exists, else the refusal is shown, never swallowed.
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#action-result")).to_be_visible()
    page.screenshot(path=tmp_path / "rollout-live.png", full_page=True)
    expect(page.locator("#action-result")).to_contain_text(re.compile(r"pause(: done| refused \(\d+\))"))
