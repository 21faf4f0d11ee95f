"""`/api/v1/deployments/`: the REST contract (roles, 201 / 400 / 409, list, decision, delete)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduler.choices import DeploymentStatus
from scheduler.models import Deployment
from tests.scheduler.inventory import capacity_state, demo_cluster

pytestmark = pytest.mark.django_db

BODY = {"name": "chat", "model": "mistral-7b", "memory_gb": 8}


@pytest.fixture
def cluster():
    return demo_cluster()


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def post(client: APIClient, **overrides):
    return client.post("/api/v1/deployments/", {**BODY, **overrides}, format="json")


# ---- access --------------------------------------------------------------------------------------


def test_anonymous_users_get_401(api, cluster):
    assert post(api).status_code == 401
    assert api.get("/api/v1/deployments/").status_code == 401


def test_viewers_may_read_but_not_deploy_or_delete(viewer_api, operator_api, cluster):
    created = post(operator_api).json()

    assert post(viewer_api).status_code == 403
    assert viewer_api.get("/api/v1/deployments/").status_code == 200
    assert viewer_api.get(f"/api/v1/deployments/{created['id']}/decision/").status_code == 200
    assert viewer_api.delete(f"/api/v1/deployments/{created['id']}/").status_code == 403
    assert Deployment.objects.get().status == DeploymentStatus.PLACED


def test_a_user_without_a_role_gets_403(api, outsider, cluster):
    api.force_authenticate(outsider)
    assert post(api).status_code == 403
    assert api.get("/api/v1/deployments/").status_code == 403


# ---- create ------------------------------------------------------------------------------------


def test_it_answers_201_with_placements_and_the_decision_url(operator_api, operator, cluster):
    response = post(operator_api, replicas=2, labels={"team": "search"})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "placed"
    assert body["created_by"] == operator.username
    assert body["memory_gb"] == 8.0 and body["memory_mib"] == 8192
    assert body["labels"] == {"team": "search"}
    assert [p["replica_index"] for p in body["placements"]] == [0, 1]
    for placement in body["placements"]:
        assert set(placement) >= {"node", "gpu_model", "gpus", "sharing", "share_percent", "mig_profile"}
        assert placement["share_percent"] == 50.0 and placement["gpu_model"] == "A100-SXM4-40GB"
    assert body["decision"] == f"http://testserver/api/v1/deployments/{body['id']}/decision/"


@pytest.mark.parametrize(("overrides", "field"), [
    ({"memory_gb": "lots"}, "memory_gb"),
    ({"memory_gb": 0}, "memory_gb"),
    ({"memory_gb": -4}, "memory_gb"),
    ({"memory_gb": True}, "memory_gb"),
    ({"memory_gb": 1e9}, "memory_gb"),
    ({"gpu_count": 0}, "gpu_count"),
    ({"gpu_count": 1.5}, "gpu_count"),
    ({"replicas": 1000}, "replicas"),
    ({"workload_type": "mining"}, "workload_type"),
    ({"priority": "urgent"}, "priority"),
    ({"sharing": "half"}, "sharing"),
    ({"sharing": "timeslice", "gpu_count": 2}, "sharing"),
    ({"labels": "team=search"}, "labels"),
    ({"labels": {"team": 7}}, "labels"),
    ({"labels": {"team": ["a"]}}, "labels"),
    ({"labels": {"no spaces allowed": "x"}}, "labels"),
    ({"name": "Chat_Bot"}, "name"),
    ({"name": "chat\x00bot"}, "name"),
    ({"model": "llama\x00"}, "model"),
    ({"namespace": "a" * 64}, "namespace"),
    ({"latency_slo_ms": -1}, "latency_slo_ms"),
    ({"enable_gpu_selection": "perhaps"}, "enable_gpu_selection"),
])
def test_bad_input_is_a_400_with_field_errors_and_stores_nothing(operator_api, cluster, overrides, field):
    response = post(operator_api, **overrides)

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Deployment.objects.exists()


def test_missing_required_fields_are_named(operator_api, cluster):
    response = operator_api.post("/api/v1/deployments/", {}, format="json")

    assert response.status_code == 400
    assert set(response.json()) >= {"name", "model", "memory_gb"}


def test_a_body_that_is_not_json_is_a_400(operator_api, cluster):
    response = operator_api.post("/api/v1/deployments/", "{not json", content_type="application/json")
    assert response.status_code == 400


def test_nothing_fits_is_a_409_with_the_diagnosis_and_the_matrix(operator_api, cluster):
    before = capacity_state()

    response = post(operator_api, memory_gb=500)

    assert response.status_code == 409
    body = response.json()
    assert body["detail"].startswith("No GPU of this cluster can hold 500 GB")
    assert "0/12 nodes are available: " in body["detail"]
    assert body["replica"] == 0
    assert body["decision"]["outcome"] == "unschedulable"
    assert len(body["decision"]["rows"]) > 0
    assert not Deployment.objects.exists()
    assert capacity_state() == before


# ---- read --------------------------------------------------------------------------------------


def test_list_filters_by_status_and_namespace_and_pages(operator_api, cluster):
    first = post(operator_api, name="a", namespace="team-a").json()
    post(operator_api, name="b", namespace="team-b")
    post(operator_api, name="c", namespace="team-b")
    assert operator_api.delete(f"/api/v1/deployments/{first['id']}/").status_code == 204

    everything = operator_api.get("/api/v1/deployments/").json()
    assert everything["count"] == 3
    assert [d["name"] for d in everything["results"]] == ["c", "b", "a"]  # newest first
    placed = operator_api.get("/api/v1/deployments/?status=placed").json()
    assert {d["name"] for d in placed["results"]} == {"b", "c"}
    team_a = operator_api.get("/api/v1/deployments/?namespace=team-a").json()
    assert [d["status"] for d in team_a["results"]] == ["deleted"]
    # ?name= is exact (how `gpuplane explain b` finds it); with namespace and status it narrows further.
    assert [d["name"] for d in operator_api.get("/api/v1/deployments/?name=b").json()["results"]] == ["b"]
    assert operator_api.get("/api/v1/deployments/?name=B").json()["count"] == 0
    assert operator_api.get("/api/v1/deployments/?name=a&status=placed").json()["count"] == 0
    page = operator_api.get("/api/v1/deployments/?limit=1&offset=1").json()
    assert page["count"] == 3 and [d["name"] for d in page["results"]] == ["b"] and page["next"]
    assert operator_api.get("/api/v1/deployments/?status=bogus").status_code == 400
    assert operator_api.get("/api/v1/deployments/?namespace=a%00b").status_code == 400
    assert operator_api.get("/api/v1/deployments/?ordering=nope").status_code == 400


def test_retrieve_and_decision_show_every_replica(operator_api, cluster):
    created = post(operator_api, replicas=3).json()

    detail = operator_api.get(f"/api/v1/deployments/{created['id']}/").json()
    assert detail["id"] == created["id"] and len(detail["placements"]) == 3
    decision = operator_api.get(f"/api/v1/deployments/{created['id']}/decision/").json()
    assert decision["deployment"] == created["id"]
    assert [d["replica_index"] for d in decision["decisions"]] == [0, 1, 2]
    for entry, placement in zip(decision["decisions"], detail["placements"], strict=True):
        assert entry["outcome"] == "placed" and entry["node"] == placement["node"]
        matrix = entry["matrix"]
        assert {r["node"] for r in matrix["rows"]} >= {"h100-node-1", "a100-node-8"}
        chosen = next(r for r in matrix["rows"] if r["rank"] == 1)
        assert chosen["node"] == placement["node"]
        assert [s["plugin"] for s in chosen["scores"]] == matrix["plugins"]  # the profile's order
        assert set(matrix["plugins"]) == set(matrix["weights"])


def test_unknown_ids_are_404(viewer_api, cluster):
    assert viewer_api.get("/api/v1/deployments/999/").status_code == 404
    assert viewer_api.get("/api/v1/deployments/999/decision/").status_code == 404
    assert viewer_api.get("/api/v1/deployments/abc/").status_code == 404


# ---- delete ------------------------------------------------------------------------------------


def test_delete_releases_everything_and_keeps_the_record(operator_api, cluster):
    before = capacity_state()
    created = post(operator_api, memory_gb=40, gpu_count=2).json()
    assert capacity_state() != before

    response = operator_api.delete(f"/api/v1/deployments/{created['id']}/")

    assert response.status_code == 204
    assert capacity_state() == before
    detail = operator_api.get(f"/api/v1/deployments/{created['id']}/").json()
    assert detail["status"] == "deleted"
    assert {p["status"] for p in detail["placements"]} == {"released"}
    assert operator_api.delete(f"/api/v1/deployments/{created['id']}/").status_code == 204  # idempotent


def test_the_201_answer_is_what_is_stored_without_reading_it_again(operator_api, cluster, monkeypatch):
    import importlib

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.services import placing

    deploy_module = importlib.import_module("scheduler.services.deploy")  # the package exports the function

    # A broker, not the eager watch: nothing moves the deployment on before the answer.
    monkeypatch.setattr(deploy_module, "watch_runs_inline", lambda: False)
    monkeypatch.setattr(placing, "enqueue_watch", lambda deployment_id: None)
    with CaptureQueriesContext(connection) as queries:
        response = post(operator_api, replicas=2, labels={"team": "search"})
    assert response.status_code == 201, response.content
    last_write = max(i for i, q in enumerate(queries.captured_queries) if q["sql"].startswith(("UPDATE", "INSERT")))
    reads_after = [q["sql"] for q in queries.captured_queries[last_write + 1:] if q["sql"].startswith("SELECT")]
    assert reads_after == []
    assert response.json() == operator_api.get(f"/api/v1/deployments/{response.json()['id']}/").json()
