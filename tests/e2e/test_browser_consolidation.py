"""Must-show 5, second half: an admin approves a consolidation plan on the demo cluster in the
browser and sees the savings page change.

The demo is what `make run` seeds: `load_demo_cluster --if-empty`, then `load_demo_deployments
--if-empty` (three quarter-GPU MPS servers, each alone on a GPU of a100-node-2). The admin runs
the analysis with the page's button, reads the plan (three moves, three GPUs freed, their price),
approves it, and the test plays Celery's part: the executor's beat task
(``execute_consolidations_task``, with the mover's ``advance_moves_task``) runs every tick on the simulated cluster, whose pods become
ready on the wall clock, until the plan is executed. The savings page then shows three more GPUs
saved and the plan's dollars per hour more, and every headline number equals GET /api/v1/savings/.
A viewer and an operator see the plans without the buttons; a rejection's reason is shown.
"""
from __future__ import annotations

import re
import time
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect

from consolidation.models import ConsolidationPlan
from consolidation.tasks import execute_consolidations_task
from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from scheduler.choices import PlacementStatus
from scheduler.demo import DEMO_DEPLOYMENTS, DEMO_NODE
from scheduler.models import Deployment, Placement
from scheduler.services.watching import watch_deployment
from scheduler.tasks import advance_moves_task
from tests.e2e.accounts import PASSWORD, VIEWER_NAME, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN_NAME = "ada"
OPERATOR_NAME = "otto"
POD_READY_S = 0.3
HEADLINE = ("baseline_gpus", "gpus_used", "gpus_saved", "saved_percent", "usd_per_hour", "kwh_per_hour")
ACTIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


def user_in(name: str, role: str) -> User:
    user = User.objects.create_user(name, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def admin() -> User:
    return user_in(ADMIN_NAME, "admin")


@pytest.fixture
def operator_user() -> User:
    return user_in(OPERATOR_NAME, "operator")


@pytest.fixture
def demo(isolated_cluster_state: str, settings) -> SimulatedCluster:
    """The demo as `make run` seeds it, its three deployments running."""
    call_command("load_demo_cluster", "--if-empty", stdout=StringIO())
    call_command("load_demo_deployments", "--if-empty", stdout=StringIO())
    cluster = SimulatedCluster(isolated_cluster_state, pod_ready_delay_s=POD_READY_S)
    time.sleep(POD_READY_S + 0.1)
    for deployment in Deployment.objects.all():
        assert watch_deployment(deployment.pk, cluster=cluster) == "running"
    return cluster


def headline(page: Page) -> dict[str, float]:
    """The savings page's headline numbers (each shown at least once, every copy equal)."""
    found = {}
    for field in HEADLINE:
        values = {float(text) for text in page.locator(f'main [data-savings="{field}"]').all_inner_texts()}
        assert len(values) == 1, (field, values)
        found[field] = values.pop()
    return found


def api_headline(page: Page, base: str) -> dict[str, float]:
    body = page.request.get(f"{base}/api/v1/savings/").json()
    return {field: float(body[field]) for field in HEADLINE}


def run_analysis(page: Page, base: str) -> tuple[dict, object]:
    page.goto(f"{base}/consolidation/")
    page.get_by_role("button", name="Run the analysis now").click()
    page.wait_for_url(re.compile(rf"{re.escape(base)}/consolidation/#plan-\d+$"))
    plan = ConsolidationPlan.objects.latest("pk")
    body = page.request.get(f"{base}/api/v1/consolidations/{plan.pk}/").json()
    return body, page.locator(f"#plan-{plan.pk}")


def test_an_admin_approves_a_plan_on_the_demo_and_the_savings_page_changes(page: Page, live_server, admin, demo):
    base = live_server.url
    sign_in(page, base, ADMIN_NAME)
    page.goto(f"{base}/savings/")
    before = headline(page)
    assert before == api_headline(page, base)

    body, card = run_analysis(page, base)
    # The plan: each demo server moves into a free slot of a GPU already in use; three GPUs go idle.
    assert body["status"] == "proposed" and len(body["moves"]) == len(DEMO_DEPLOYMENTS) == 3
    assert {m["from_node"] for m in body["moves"]} == {DEMO_NODE}
    assert sorted(m["from_gpus"][0] for m in body["moves"]) == sorted(d.gpu for d in DEMO_DEPLOYMENTS)
    assert body["gpus_freed"] == 3 and body["savings_per_hour"]["usd"] > 0
    expect(card.locator('[data-plan="status"]')).to_have_text("Proposed (waiting for an admin)")
    expect(card.locator('[data-plan="moves"]')).to_have_text("3")
    expect(card.locator('[data-plan="gpus_freed"]')).to_have_text("3")
    expect(card.locator('[data-plan="nodes_freed"]')).to_have_text(str(len(body["nodes_freed"])))
    expect(card.locator('[data-plan="usd"]')).to_have_text(f"{body['savings_per_hour']['usd']:.2f}")
    for move in body["moves"]:
        row = card.locator("tbody tr", has_text=move["workload"])
        expect(row).to_contain_text(f"{move['from_node']} GPU {move['from_gpus'][0]}")
        expect(row).to_contain_text(move["to_node"])

    card.get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("approved")
    plan_id = body["id"]
    expect(page.locator(f"#plan-{plan_id} [data-plan='status']")).to_have_text("Approved")

    # Celery's part: the executor's beat task, tick after tick, on the simulated cluster's clock.
    statuses = []
    for _ in range(100):
        execute_consolidations_task()
        advance_moves_task()
        execute_consolidations_task()
        status = ConsolidationPlan.objects.get(pk=plan_id).status
        statuses.append(status)
        if status not in ("approved", "executing"):
            break
        time.sleep(0.1)
    stored = ConsolidationPlan.objects.get(pk=plan_id)
    assert stored.status == "executed", stored.reason
    assert "executing" in statuses and "3 of 3 move(s) done" in stored.reason
    # Replacement first: every original was released after its replacement was placed.
    verbs = list(AuditEvent.objects.filter(object_type="consolidation.consolidationplan", object_id=str(plan_id))
                 .order_by("pk").values_list("verb", flat=True))
    assert verbs.count("consolidationplan.move_done") == 3
    assert verbs.index("consolidationplan.replacement_placed") < verbs.index("consolidationplan.move_done")
    # The GPUs the plan emptied hold nothing of gpuplane's any more.
    emptied = {(m["from_node"], m["from_gpus"][0]) for m in body["moves"]}
    held = {(p.node.name, i) for p in Placement.objects.filter(status__in=ACTIVE).select_related("node")
            for i in p.gpu_indexes}
    assert not emptied & held

    # The watch task's part: each replacement is marked running once its pod is ready (the savings
    # count only replicas that run).
    for deployment in Deployment.objects.all():
        watch_deployment(deployment.pk, cluster=demo)
    page.reload()
    expect(page.locator(f"#plan-{plan_id} [data-plan='status']")).to_have_text("Executed")
    expect(page.locator(f"#plan-{plan_id} [data-plan='reason']")).to_contain_text("3 of 3 move(s) done")

    page.get_by_role("link", name="Savings", exact=True).click()
    page.wait_for_url(f"{base}/savings/")
    after = headline(page)
    assert after == api_headline(page, base)
    # Same workloads, three fewer GPUs in use: three more saved, at the plan's price.
    assert after["baseline_gpus"] == before["baseline_gpus"]
    assert after["gpus_used"] == before["gpus_used"] - 3
    assert after["gpus_saved"] == before["gpus_saved"] + 3
    assert after["saved_percent"] > before["saved_percent"]
    assert after["usd_per_hour"] == pytest.approx(before["usd_per_hour"] + body["savings_per_hour"]["usd"], abs=0.01)
    assert after["kwh_per_hour"] == pytest.approx(before["kwh_per_hour"] + body["savings_per_hour"]["kwh"], abs=0.001)


def test_viewers_and_operators_see_no_buttons_and_a_rejection_shows_its_reason(
    page: Page, chromium: Browser, live_server, admin, operator_user, viewer_user, demo
):
    base = live_server.url
    sign_in(page, base, ADMIN_NAME)
    body, card = run_analysis(page, base)
    assert body["moves"]

    for name in (VIEWER_NAME, OPERATOR_NAME):
        context = chromium.new_context(viewport={"width": 1360, "height": 900})
        try:
            other = context.new_page()
            sign_in(other, base, name)
            other.goto(f"{base}/consolidation/")
            expect(other.locator(f"#plan-{body['id']} [data-plan='moves']")).to_have_text(str(len(body["moves"])))
            for button in ("Approve", "Reject", "Run the analysis now"):
                expect(other.get_by_role("button", name=button)).to_have_count(0)
        finally:
            context.close()

    card.get_by_label("Reason").fill("not during the product launch")
    card.get_by_role("button", name="Reject").click()
    expect(page.locator(".messages")).to_contain_text("rejected")
    rejected = page.locator(f"#plan-{body['id']}")
    expect(rejected.locator("[data-plan='status']")).to_have_text("Rejected")
    expect(rejected.locator("[data-plan='reason']")).to_contain_text("not during the product launch")
    expect(rejected.get_by_role("button", name="Approve")).to_have_count(0)
    assert ConsolidationPlan.objects.get(pk=body["id"]).status == "rejected"
    assert AuditEvent.objects.filter(verb="consolidationplan.rejected", reason__contains="product launch").exists()
