"""The Disruptions page (nav link, moves in flight and past, what holds one back) and a lost
replica said on its deployment's page."""
from __future__ import annotations

import pytest
from django.test import Client

from scheduler.models import Move

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_disruptions_page_lists_moves_with_who_why_and_the_budget_holding_one_back(moves, viewer):
    done, blocked = moves
    page = signed_in(viewer).get("/disruptions/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/disruptions/" aria-current="page">Disruptions</a>' in html
    assert f'id="move-{done.pk}"' in html and f'id="move-{blocked.pk}"' in html
    assert "Consolidation plan" in html and "consolidationplan:3" in html and "frees gpu" in html
    assert "refused (429) by PDB" in html and "minAvailable 100%" in html
    assert 'data-moves="in_flight">1<' in html
    only_done = signed_in(viewer).get("/disruptions/?status=done").content.decode()
    assert f'id="move-{done.pk}"' in only_done and f'id="move-{blocked.pk}"' not in only_done
    assert signed_in(viewer).get("/disruptions/?status=flying").status_code == 200  # a form error, no rows


def test_every_page_links_to_it(viewer):
    assert 'href="/disruptions/"' in signed_in(viewer).get("/").content.decode()


def test_a_lost_replica_is_said_on_its_deployment_page(moves, viewer):
    done, _ = moves
    Move.objects.filter(pk=done.pk).update(status="failed", lost=True,
                                           reason="replica lost: the original on gpu-1 was evicted and its replacement is gone")
    html = signed_in(viewer).get(f"/deployments/{done.deployment_id}/").content.decode()
    assert 'data-move="lost"' in html and "Replica lost:" in html and "its replacement is gone" in html
    assert f"/disruptions/?deployment={done.deployment_id}" in html
