"""Sizing through `POST /api/v1/deployments/` on the demo cluster (issue 8): each sharing mode sizes by
its own unit, an optional `share_percent` states the compute share, the decision names the rule,
and placements report the `mig_profile` and `memory_gb` they got."""
from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from scheduler.models import Deployment
from tests.scheduler.inventory import demo_cluster

pytestmark = pytest.mark.django_db

# The smallest instance with 8 GB (8192 MiB) of each demo MIG model: an H100-80GB 1g.10gb has
# 9984 MiB (as NVML reports it); an A100-40GB 1g.5gb has 4864 (too small), its 2g.10gb 9856.
SMALLEST_8GB = {"H100-SXM5-80GB": "1g.10gb", "A100-SXM4-40GB": "2g.10gb"}


@pytest.fixture
def cluster():
    return demo_cluster()


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def post(client: APIClient, **body):
    return client.post("/api/v1/deployments/", {"name": "chat", "model": "mistral-7b", **body}, format="json")


def test_8_gb_on_mig_takes_the_smallest_free_instance_that_holds_it(operator_api, cluster):
    response = post(operator_api, memory_gb=8, sharing="mig")

    assert response.status_code == 201, response.content
    (placement,) = response.json()["placements"]
    assert placement["sharing"] == "mig"
    # Not a 4g.40gb (the old 50 % rule): the smallest instance with 8 GB on the chosen GPU model.
    assert placement["mig_profile"] == SMALLEST_8GB[placement["gpu_model"]]
    assert placement["memory_gb"] == round(Deployment.objects.get().placements.get().memory_mib / 1024, 2)
    assert placement["memory_gb"] >= 8
    decision = operator_api.get(f"/api/v1/deployments/{response.json()['id']}/decision/").json()
    matrix = decision["decisions"][0]["matrix"]
    assert matrix["sizing"] == f"MIG: smallest free instance with at least 8 GB -> {placement['mig_profile']}"
    # Both MIG nodes could hold it: the A100 with free 3g.20gb / 2g.10gb is no longer refused a share.
    feasible = {row["node"] for row in matrix["rows"] if row["feasible"]}
    assert {"h100-node-3", "a100-node-5"} <= feasible


def test_6_gb_of_time_slicing_for_development_is_sized_by_memory(operator_api, cluster):
    response = post(operator_api, memory_gb=6, sharing="timeslice", workload_type="development")

    assert response.status_code == 201, response.content
    (placement,) = response.json()["placements"]
    assert (placement["node"], placement["sharing"], placement["memory_gb"]) == ("h100-node-4", "timeslice", 6.0)
    matrix = Deployment.objects.get().decisions.get().matrix
    assert matrix["sizing"].startswith("time-slicing: a replica with 6 GB free -> a replica of GPU ")


def test_a_stated_share_percent_is_stored_returned_and_used(operator_api, cluster):
    # 8 GB defaults to 50 % on MPS; stating 25 % lets an R=4 slot (a100-node-2) serve it.
    response = post(operator_api, memory_gb=8, sharing="mps", share_percent=25)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["share_percent"] == 25
    (placement,) = body["placements"]
    assert (placement["node"], placement["share_percent"]) == ("a100-node-2", 25.0)
    assert Deployment.objects.get().share_percent == 25
    matrix = Deployment.objects.get().decisions.get().matrix
    assert matrix["request"]["share_milli"] == 250
    assert matrix["sizing"].startswith("MPS: 25 % as requested, at least 8 GB -> 25 % of GPU ")


def test_without_share_percent_mps_uses_the_class_default(operator_api, cluster):
    response = post(operator_api, memory_gb=8, sharing="mps")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["share_percent"] is None
    assert body["placements"][0]["share_percent"] == 50.0
    matrix = Deployment.objects.get().decisions.get().matrix
    assert matrix["sizing"].startswith("MPS: 50 % by default for a medium model, at least 8 GB -> ")


@pytest.mark.parametrize("body", [
    {"share_percent": 0},
    {"share_percent": 101},
    {"share_percent": 12.5},
    {"share_percent": True},
    {"share_percent": "half"},
    {"share_percent": 50, "sharing": "exclusive"},
    {"share_percent": 50, "gpu_count": 2},
])
def test_a_bad_share_percent_is_a_400_naming_it(operator_api, cluster, body):
    response = post(operator_api, memory_gb=8, **body)

    assert response.status_code == 400, response.content
    assert "share_percent" in response.json()
    assert not Deployment.objects.exists()


def test_share_percent_is_in_the_openapi_schema():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    create = schema["components"]["schemas"]["DeploymentCreate"]["properties"]["share_percent"]
    assert (create["minimum"], create["maximum"], create["nullable"]) == (1, 100, True)
    placement = schema["components"]["schemas"]["Placement"]["properties"]
    assert {"mig_profile", "memory_gb"} <= set(placement)
