"""The deployment pages: who may see them, deploy and delete.

Deploys go through the real services on the 12-node demo cluster (nodes.demo) in the simulator,
so the matrix on the page is the one the placement engine stored.
"""
from __future__ import annotations

import pytest

from scheduler.models import Deployment
from tests.scheduler.pages.deploying import LOW_BATCH, deploy, signed_in

pytestmark = pytest.mark.django_db

# ---- access ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/deployments/", "/deployments/new/", "/deployments/1/"])
def test_it_sends_anonymous_users_to_the_sign_in_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


@pytest.mark.parametrize("url", ["/deployments/", "/deployments/new/"])
def test_it_refuses_users_without_a_role(outsider, url):
    response = signed_in(outsider).get(url)
    assert response.status_code == 403
    assert "You have no role in gpuplane" in response.content.decode()


def test_a_viewer_reads_the_list_but_gets_no_deploy_link(viewer_client):
    response = viewer_client.get("/deployments/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'href="/deployments/new/"' not in body
    # The main navigation marks the page.
    assert '<a href="/deployments/" aria-current="page">Deployments</a>' in body


def test_an_operator_gets_the_deploy_link(operator_client):
    assert 'href="/deployments/new/"' in operator_client.get("/deployments/").content.decode()


def test_a_viewer_may_not_open_or_submit_the_deploy_form(viewer_client, demo):
    response = viewer_client.get("/deployments/new/")
    assert response.status_code == 403
    assert "this page needs the <strong>operator</strong> role" in response.content.decode()
    assert viewer_client.post("/deployments/new/", LOW_BATCH).status_code == 403
    assert not Deployment.objects.exists()


def test_a_viewer_may_not_delete(viewer_client, demo):
    deployment = deploy(name="app")
    assert viewer_client.get(f"/deployments/{deployment.pk}/delete/").status_code == 403
    assert viewer_client.post(f"/deployments/{deployment.pk}/delete/").status_code == 403
    deployment.refresh_from_db()
    assert deployment.status == "placed"
    body = viewer_client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert f'href="/deployments/{deployment.pk}/delete/"' not in body


def test_an_unknown_deployment_is_a_404(viewer_client):
    assert viewer_client.get("/deployments/999999/").status_code == 404
