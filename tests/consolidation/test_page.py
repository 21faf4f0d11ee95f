"""The consolidation page: plans with moves and savings; Approve / Reject only for admins."""
from __future__ import annotations

import pytest
from django.test import Client

from consolidation.analysis import analyse
from consolidation.models import ConsolidationPlan
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def plan() -> ConsolidationPlan:
    mps_cluster(FakeClock(), node_count=3, deployments=2)
    found = analyse()
    assert found is not None and found.moves
    return found


def test_admins_see_the_buttons_and_approve(plan, admin_user):
    page = signed_in(admin_user).get("/consolidation/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f"plan-{plan.pk}" in html and plan.nodes_freed[0] in html and "/h" in html
    assert "Approve" in html and "Reject" in html
    response = signed_in(admin_user).post(f"/consolidation/{plan.pk}/approve/")
    assert response.status_code == 302
    assert ConsolidationPlan.objects.get(pk=plan.pk).status == "approved"


def test_reject_from_the_page_needs_a_reason(plan, admin_user):
    client = signed_in(admin_user)
    client.post(f"/consolidation/{plan.pk}/reject/", {"reason": ""})
    assert ConsolidationPlan.objects.get(pk=plan.pk).status == "proposed"
    client.post(f"/consolidation/{plan.pk}/reject/", {"reason": "during the launch"})
    stored = ConsolidationPlan.objects.get(pk=plan.pk)
    assert stored.status == "rejected" and "during the launch" in stored.reason


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_others_see_plans_but_cannot_decide(plan, role, request):
    client = signed_in(request.getfixturevalue(role))
    html = client.get("/consolidation/").content.decode()
    assert f"plan-{plan.pk}" in html and "Approve</button>" not in html
    assert client.post(f"/consolidation/{plan.pk}/approve/").status_code == 403
    assert ConsolidationPlan.objects.get(pk=plan.pk).status == "proposed"


def test_admins_run_the_analysis_from_the_page(admin_user):
    mps_cluster(FakeClock(), node_count=3, deployments=2)
    client = signed_in(admin_user)
    assert "Run the analysis now" in client.get("/consolidation/").content.decode()
    response = client.post("/consolidation/analyse/")
    plan = ConsolidationPlan.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"#plan-{plan.pk}")
    assert plan.moves and plan.created_by == admin_user
    html = client.get("/consolidation/").content.decode()
    # The disruption budget each moved deployment used, and where it comes from.
    assert "Disruption budgets used" in html and "GPUPLANE_CONSOLIDATION_MOVES_PER_DEPLOYMENT" in html


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_others_cannot_run_the_analysis(role, request):
    mps_cluster(FakeClock(), node_count=3, deployments=2)
    client = signed_in(request.getfixturevalue(role))
    assert "Run the analysis now" not in client.get("/consolidation/").content.decode()
    assert client.post("/consolidation/analyse/").status_code == 403
    assert not ConsolidationPlan.objects.exists()
