"""The rollout pages: roles, the form's field errors (the API's messages), the preview, the 409
answer, and the live page's numbers (the API's)."""
from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from lifecycle.models import AuditEvent
from nodes.contract import ANNOTATION_DO_NOT_DISRUPT
from rollouts.models import NODE_STATES, ROLLOUT_STATES, RollingUpdate
from tests.rollouts.cluster import nodes, replica

pytestmark = pytest.mark.django_db

NEW = "/rollouts/new/"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(**overrides):
    return {"name": "ts4", "nodes": ["gpu-a", "gpu-b"], "mode": "timeslice", "replicas": "4", "mig_layout": "",
            "strategy": "rolling", "max_unavailable": "1", "on_failure": "pause", **overrides}


@pytest.fixture
def cluster():
    """gpu-a (1 GPU busy with "chat"), gpu-b (empty), gpu-c (2 free GPUs): exclusive H100 x2."""
    a, b, c = nodes("gpu-a", "gpu-b", "gpu-c")
    replica(a, "chat")
    return a, b, c


# ---- roles -----------------------------------------------------------------------------------------


def test_viewers_see_the_list_without_the_form(viewer, cluster):
    client = signed_in(viewer)
    body = client.get("/rollouts/").content.decode()
    assert "No rollouts yet." in body
    assert NEW not in body
    assert client.get(NEW).status_code == 403
    assert client.post(NEW, form(create="1")).status_code == 403
    assert not RollingUpdate.objects.exists()


def test_anonymous_users_are_sent_to_sign_in():
    response = Client().get("/rollouts/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_operators_get_the_form_and_the_navigation_link(operator, cluster):
    client = signed_in(operator)
    listing = client.get("/rollouts/").content.decode()
    assert f'href="{NEW}"' in listing
    assert 'href="/rollouts/" aria-current="page">Rollouts</a>' in listing
    body = client.get(NEW).content.decode()
    for field in ("name", "nodes", "mode", "replicas", "mig_layout", "strategy", "max_unavailable", "on_failure"):
        assert f'name="{field}"' in body
    assert body.count('name="nodes"') == 3  # one box per node


# ---- preview, errors, create -------------------------------------------------------------------------


def test_preview_shows_the_dry_run_as_the_api_gives_it_and_stores_nothing(operator, cluster):
    client = signed_in(operator)
    body = client.post(NEW, form(preview="1")).content.decode()
    api = client.post("/api/v1/rollouts/preview/", {"name": "ts4", "nodes": ["gpu-a", "gpu-b"],
                      "config": {"mode": "timeslice", "replicas": 4}}, content_type="application/json").json()
    assert 'id="rollout-preview"' in body and "Safe to create" in body
    shown = re.findall(r'<th scope="row" class="num">(\d+)</th>\s*<td>([^<]*)</td>\s*<td class="num">([\d.]+) %', body)
    assert shown == [(str(b["index"]), ", ".join(b["nodes"]), str(b["capacity_dip_percent"])) for b in api["batches"]]
    assert len(shown) == 2
    # chat (1000 milli) moves off gpu-a before its batch drains; where it goes is named.
    [move] = [m for b in api["batches"] for m in b["moves"]]
    assert (move["workload"], move["source"]) == ("default/chat", "gpu-a")
    assert f"<code>default/chat</code> (1000 m): gpu-a → {move['destination']}" in body
    assert not RollingUpdate.objects.exists()
    assert not AuditEvent.objects.filter(object_type="rollouts.rollingupdate").exists()


def test_the_form_shows_the_apis_field_errors(operator, cluster):
    client = signed_in(operator)
    body = client.post(NEW, form(name="Bad Name", nodes=["gpu-a"], replicas="", preview="1")).content.decode()
    assert "Enter a DNS label" in body
    assert 'id="rollout-preview"' not in body
    # NVIDIA's rule for the GPU model, from rollouts.creating, under the MIG layout field.
    body = client.post(NEW, form(mode="mig", replicas="", mig_layout="9g.99gb=1", create="1")).content.decode()
    assert re.search(r'field--invalid">\s*<label for="id_mig_layout">', body), body
    assert "H100-SXM5-80GB (gpu-a, gpu-b)" in body
    body = client.post(NEW, form(max_unavailable="0", nodes=["gpu-a", "nope"], create="1")).content.decode()
    assert re.search(r'field--invalid">\s*<label for="id_max_unavailable">', body)
    assert "Select a valid choice. nope is not one of the available choices." in body
    body = client.post(NEW, form(mode="mig", replicas="", mig_layout="3g.40gb", create="1")).content.decode()
    assert "Write each profile as profile=count" in body
    assert not RollingUpdate.objects.exists()


def test_create_stores_it_and_opens_its_page(operator, cluster):
    response = signed_in(operator).post(NEW, form(create="1"), follow=True)
    rollout = RollingUpdate.objects.get()
    assert response.redirect_chain == [(f"/rollouts/{rollout.pk}/", 302)]
    assert (rollout.status, rollout.config["mode"], rollout.config["replicas"]) == ("pending", "timeslice", 4)
    assert rollout.created_by == operator
    body = response.content.decode()
    assert body.count('<tr data-node="') == 2
    listing = signed_in(operator).get("/rollouts/").content.decode()
    assert f'href="/rollouts/{rollout.pk}/">ts4</a>' in listing and "0.0 %" in listing and "Pending" in listing


def test_an_unknown_rollout_is_a_404(viewer):
    assert signed_in(viewer).get("/rollouts/999/").status_code == 404


def test_a_refused_rollout_shows_the_reasons_and_stores_nothing(operator, cluster):
    a, b, c = cluster
    replica(c, "pinned", labels={ANNOTATION_DO_NOT_DISRUPT: "true"}, gpus=2)
    replica(b, "big", gpus=2)
    body = signed_in(operator).post(NEW, form(create="1")).content.decode()
    assert 'id="rollout-refused"' in body and "cannot be done safely now" in body
    # The 409's reasons, and the preview's refusals under them, name the workload that cannot move.
    refused = re.search(r'id="rollout-refused">(.*?)</section>', body, re.S).group(1)
    assert "default/chat on gpu-a cannot move" in refused
    assert re.search(r'id="preview-refusals"><li><code>default/chat</code> on gpu-a: ', body)
    assert not RollingUpdate.objects.exists()


# ---- the live page ---------------------------------------------------------------------------------


def create(client: Client) -> RollingUpdate:
    client.post(NEW, form(create="1"))
    return RollingUpdate.objects.get()


def test_the_live_page_shows_the_apis_numbers_and_buttons_by_status(operator, viewer, cluster):
    rollout = create(signed_in(operator))
    step = rollout.nodes.get(node_name="gpu-a")
    assert ROLLOUT_STATES.move(rollout, "running", reason="started")
    assert NODE_STATES.move(step, "prewarming", reason="moving chat")
    assert NODE_STATES.move(step, "draining") and NODE_STATES.move(step, "reconfiguring") and NODE_STATES.move(step, "verifying")
    assert NODE_STATES.move(step, "succeeded")

    client = signed_in(operator)
    api = client.get(f"/api/v1/rollouts/{rollout.pk}/").json()
    body = client.get(f"/rollouts/{rollout.pk}/").content.decode()
    assert api["progress_percent"] == 50.0
    assert f'<strong id="rollout-progress">{api["progress_percent"]:.1f} %</strong>' in body
    rows = re.findall(r'<tr data-node="([^"]+)">.*?badge--\w+">([^<]+)</span>.*?width: (\d+)%', body, re.S)
    assert rows == [(n["node"], n["state"], "100" if n["state"] == "succeeded" else "0") for n in api["nodes"]]
    # Running: pause and abort are offered, start and resume are there but hidden.
    buttons = dict(re.findall(r'data-action="(\w+)"( hidden)?>', body))
    assert buttons == {"start": " hidden", "pause": "", "resume": " hidden", "abort": ""}
    # The audit trail of this rollout: created, then started.
    assert "rollingupdate.created" in body
    words = json.loads(re.search(r'id="rollout-live-words" type="application/json">(.*?)</script>', body).group(1))
    assert words["actions"]["paused"] == ["resume", "abort"] and words["step_percent"]["succeeded"] == 100

    viewer_body = signed_in(viewer).get(f"/rollouts/{rollout.pk}/").content.decode()
    assert 'data-action="' not in viewer_body
    assert f'<strong id="rollout-progress">{api["progress_percent"]:.1f} %</strong>' in viewer_body


def test_preview_names_skipped_nodes_with_their_reason(operator, cluster):
    a, b, c = cluster
    replica(b, "pinned", labels={ANNOTATION_DO_NOT_DISRUPT: "true"})
    client = signed_in(operator)
    body = client.post(NEW, form(preview="1")).content.decode()
    api = client.post("/api/v1/rollouts/preview/", {"name": "ts4", "nodes": ["gpu-a", "gpu-b"],
                      "config": {"mode": "timeslice", "replicas": 4}}, content_type="application/json").json()
    [skipped] = api["skipped"]
    assert skipped["node"] == "gpu-b"
    assert f'<ul id="preview-skipped"><li>gpu-b: {skipped["reason"]}</li></ul>' in body.replace("&#x27;", "'")
    assert re.findall(r'<th scope="row" class="num">(\d+)</th>\s*<td>([^<]*)</td>', body) == [("1", "gpu-a")]


def test_the_list_filters_by_status_and_refuses_an_unknown_one(operator, cluster):
    client = signed_in(operator)
    create(client)
    assert "ts4</a>" in client.get("/rollouts/?status=pending").content.decode()
    assert "ts4</a>" not in client.get("/rollouts/?status=running").content.decode()
    response = client.get("/rollouts/?status=bogus")
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode() and "ts4</a>" not in response.content.decode()
