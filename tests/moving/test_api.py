"""`GET /api/v1/moves/`: moves in flight and past, who asked and why, what holds one back, timings."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

URL = "/api/v1/moves/"


def test_it_lists_moves_with_who_why_and_what_holds_them_back(moves, viewer_api):
    done, blocked = moves
    body = viewer_api.get(URL).json()
    assert body["count"] == 2
    newest, oldest = body["results"]
    assert newest["id"] == blocked.pk and newest["status"] == "replacement_ready"
    assert newest["requested_by"] == "rollout" and newest["why"] == "reconfigures its node"
    assert "refused (429) by PDB" in newest["blocked_reason"] and newest["finished_at"] is None
    assert oldest["status"] == "done" and oldest["requester"] == "consolidationplan:3"
    assert oldest["evicted_pod"] and oldest["placed_at"] <= oldest["ready_at"] <= oldest["evicted_at"]
    assert oldest["deployment_name"] == str(done.deployment)


@pytest.mark.parametrize(("query", "ids"), [
    ("?in_flight=true", "blocked"), ("?in_flight=false", "done"), ("?status=done", "done"),
    ("?requested_by=rollout", "blocked"), ("?requested_by=consolidation&status=replacement_ready", ""),
])
def test_it_filters(moves, viewer_api, query, ids):
    done, blocked = moves
    expected = [{"done": done.pk, "blocked": blocked.pk}[name] for name in ids.split(",") if name]
    response = viewer_api.get(URL + query)
    assert response.status_code == 200, response.content
    assert [row["id"] for row in response.json()["results"]] == expected


def test_a_bad_filter_is_a_400_and_one_move_reads_by_id(moves, viewer_api):
    done, _ = moves
    assert viewer_api.get(URL + "?status=flying").status_code == 400
    assert viewer_api.get(URL + "?colour=red").status_code == 400
    assert viewer_api.get(f"{URL}{done.pk}/").json()["id"] == done.pk
    assert viewer_api.get(f"{URL}999999/").status_code == 404
