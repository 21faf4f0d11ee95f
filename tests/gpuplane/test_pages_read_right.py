"""Figures and words on pages and in the API agree (issue 23): shares rounded, not truncated, the
same way in both; dates print as 2026-11-27 07:19 UTC (never "a.m.."); the Django admin shows
inventory, deployments and placements but offers no way to change them past the services."""
from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from nodes.models import Node
from scheduler.models import Deployment
from scheduler.services import DeploySpec, deploy
from tests.scheduler.inventory import demo_cluster

pytestmark = pytest.mark.django_db


def test_a_mig_placements_share_is_rounded_like_the_pages_not_truncated(admin_user):
    cluster = demo_cluster()
    # 8 GB on MIG takes a 2g.10gb on an A100-40GB: 2/7 of the GPU = 28.571... %.
    deployment = deploy(DeploySpec(name="two-sevenths", model="m", memory_gb=8, sharing="mig"), cluster=cluster)
    api = APIClient()
    api.force_authenticate(admin_user)

    placement = api.get(f"/api/v1/deployments/{deployment.pk}/").json()["placements"][0]

    assert placement["mig_profile"] == "2g.10gb"
    assert placement["share_percent"] == 28.6  # was 28.5: the stored 285 thousandths, truncated
    client = Client()
    client.force_login(admin_user)
    assert "28.6&nbsp;%" in client.get(f"/deployments/{deployment.pk}/").content.decode()


def test_dates_print_unambiguously_and_never_a_m_dot_dot(admin_user):
    from savings.services.history import record_sample

    demo_cluster()
    record_sample(timezone.now())
    client = Client()
    client.force_login(admin_user)
    page = client.get("/savings/").content.decode()
    assert "a.m." not in page and "p.m." not in page
    assert f"{timezone.now():%Y-%m-%d}" in page and " UTC" in page


@pytest.mark.parametrize("model", ["node", "gpu", "partition"])
def test_the_admin_shows_inventory_but_offers_no_add_change_or_delete(admin_user, model):
    demo_cluster()
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    row = {"node": Node, "gpu": Node.objects.first().gpus.model, "partition": None}[model]
    listing = client.get(f"/admin/nodes/{model}/")
    assert listing.status_code == 200
    assert "Add " not in listing.content.decode().split('id="content-main"')[1][:2000]
    assert client.get(f"/admin/nodes/{model}/add/").status_code == 403
    if row is not None:
        obj = row.objects.first()
        view = client.get(f"/admin/nodes/{model}/{obj.pk}/change/")
        assert view.status_code == 200 and 'name="_save"' not in view.content.decode()  # a view, no save button
        assert client.post(f"/admin/nodes/{model}/{obj.pk}/delete/", {"post": "yes"}).status_code == 403
        assert row.objects.filter(pk=obj.pk).exists()


@pytest.mark.parametrize("model", ["deployment", "placement"])
def test_the_admin_shows_deployments_and_placements_read_only(admin_user, model):
    cluster = demo_cluster()
    deployment = deploy(DeploySpec(name="kept", model="m", memory_gb=8), cluster=cluster)
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    obj = deployment if model == "deployment" else deployment.placements.get()

    assert client.get(f"/admin/scheduler/{model}/add/").status_code == 403
    view = client.get(f"/admin/scheduler/{model}/{obj.pk}/change/")
    assert view.status_code == 200 and 'name="_save"' not in view.content.decode()
    assert client.post(f"/admin/scheduler/{model}/{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Deployment.objects.filter(pk=deployment.pk).exists()
