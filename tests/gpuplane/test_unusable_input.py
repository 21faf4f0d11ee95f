"""Inputs that once gave a 500, and places where the schema and the API disagreed (issue 23).

A NUL byte in a path parameter reached PostgreSQL (DataError); a lone surrogate in a choice
field was echoed by "not a valid choice" and broke the JSON renderer. Both are now 400s naming
the field, for every endpoint at once (gpuplane/path_parameters.py, gpuplane/parsers.py). These
run on SQLite and, in CI, on PostgreSQL, where the NUL paths used to fail.
"""
from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from gpuplane.parsers import SURROGATE_MESSAGE
from gpuplane.path_parameters import MESSAGE as PATH_MESSAGE
from scheduler.demo import load_demo_deployments
from scheduler.models import Deployment
from scheduler.services import MIN_MEMORY_GB
from tests.scheduler.inventory import demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


@pytest.mark.parametrize(("path", "parameter"), [
    ("/api/v1/nodes/%00/", "name"),
    ("/api/v1/gpus/%00/", "uuid"),
    ("/api/v1/gpus/%00/series/", "uuid"),
    ("/api/v1/nodes/a%00b/series/", "name"),
])
def test_it_answers_400_naming_a_path_parameter_that_holds_nul(admin_api, path, parameter):
    demo_cluster()
    response = admin_api.get(path)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json() == {parameter: [PATH_MESSAGE]}


def test_a_page_with_nul_in_its_path_is_a_400_too(admin_user):
    demo_cluster()
    client = Client()
    client.force_login(admin_user)
    response = client.get("/nodes/gpu%00node/")
    assert response.status_code == 400
    assert b"Null characters" in response.content


def test_a_real_name_still_resolves(admin_api):
    demo_cluster()
    assert admin_api.get("/api/v1/nodes/a100-node-1/").status_code == 200


def _post_raw(client: APIClient, path: str, body: str):
    """`body` is JSON text as a client sends it: `\\ud800` stays an escape, as on the wire."""
    return client.post(path, data=body.encode("ascii"), content_type="application/json")


def _with_surrogate(body: dict, escape: str) -> str:
    """JSON text of `body` with the value "LONE" spelt as the escape of a lone surrogate."""
    return json.dumps(body).replace('"LONE"', f'"{escape}"')


@pytest.mark.parametrize("field", ["priority", "workload_type"])
def test_a_lone_surrogate_in_a_deployment_choice_is_a_400_naming_it(admin_api, field):
    body = _with_surrogate({"name": "x", "model": "m", "memory_gb": 8, field: "LONE"}, "\\ud800")
    response = _post_raw(admin_api, "/api/v1/deployments/", body)
    assert response.status_code == 400
    assert response.json() == {field: [SURROGATE_MESSAGE]}
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("path", ["/api/v1/rollouts/", "/api/v1/rollouts/preview/"])
@pytest.mark.parametrize("field", ["strategy", "on_failure"])
def test_a_lone_surrogate_in_a_rollout_choice_is_a_400_naming_it(admin_api, path, field):
    demo_cluster()
    body = _with_surrogate({"name": "r", "nodes": ["a100-node-1"], "config": {"mode": "mps", "replicas": 4},
                            field: "LONE"}, "\\udfff")
    response = _post_raw(admin_api, path, body)
    assert response.status_code == 400
    assert response.json() == {field: [SURROGATE_MESSAGE]}


def test_a_surrogate_in_a_nested_field_or_key_is_named_without_echoing_it(admin_api):
    body = '{"name": "x", "model": "m", "memory_gb": 8, "labels": {"team": "\\ud800", "\\udc00k": "v"}}'
    response = _post_raw(admin_api, "/api/v1/deployments/", body)
    assert response.status_code == 400
    assert response.json() == {"labels.team": [SURROGATE_MESSAGE], "labels.?k": [SURROGATE_MESSAGE]}


def test_created_by_is_null_for_demo_deployments_and_the_schema_says_so(admin_api):
    demo_cluster()
    load_demo_deployments()
    listed = admin_api.get("/api/v1/deployments/").json()["results"]
    assert listed and all(row["created_by"] is None for row in listed)
    schema = admin_api.get("/api/schema/?format=json").json()
    created_by = schema["components"]["schemas"]["Deployment"]["properties"]["created_by"]
    assert created_by["nullable"] is True and created_by["type"] == "string"


@pytest.mark.parametrize("value", ["0", "1", "yes", "on", "False"])
def test_a_form_encoded_boolean_must_be_true_or_false(admin_api, value):
    response = admin_api.post("/api/v1/deployments/", {
        "name": "x", "model": "m", "memory_gb": "8", "allow_default_scheduler": value,
    })  # multipart, like a form post: text values
    assert response.status_code == 400
    assert response.json() == {"allow_default_scheduler": ["Enter true or false."]}


@pytest.mark.parametrize("value", [0, 1, "true", None])
def test_a_json_boolean_must_be_a_json_boolean(admin_api, value):
    body = {"name": "x", "model": "m", "memory_gb": 8, "enable_gpu_selection": value}
    response = admin_api.post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 400
    assert "enable_gpu_selection" in response.json()


def test_a_form_post_that_leaves_a_boolean_out_gets_its_documented_default(admin_api):
    demo_cluster()
    response = admin_api.post("/api/v1/deployments/", {"name": "x", "model": "m", "memory_gb": "8",
                                                        "allow_default_scheduler": "false"})
    assert response.status_code == 201, response.content
    deployment = Deployment.objects.get(name="x")
    # enable_gpu_selection was left out: true (its default), not false as DRF's form reading had it.
    assert response.json()["enable_gpu_selection"] is True
    assert deployment.enable_gpu_selection is True


@pytest.mark.parametrize("memory_gb", [5e-324, 0.0009, 1e-10])
def test_memory_below_one_mib_is_a_400_not_a_one_mib_deployment(admin_api, memory_gb):
    demo_cluster()
    body = json.dumps({"name": "tiny", "model": "m", "memory_gb": memory_gb})
    response = admin_api.post("/api/v1/deployments/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()) == ["memory_gb"]
    assert not Deployment.objects.exists()


def test_one_mib_is_the_smallest_deployment_and_the_schema_states_it(admin_api):
    demo_cluster()
    response = admin_api.post("/api/v1/deployments/", {"name": "tiny", "model": "m", "memory_gb": MIN_MEMORY_GB},
                              format="json")
    assert response.status_code == 201, response.content
    assert Deployment.objects.get(name="tiny").memory_mib == 1
    schema = admin_api.get("/api/schema/?format=json").json()
    memory = schema["components"]["schemas"]["DeploymentCreate"]["properties"]["memory_gb"]
    assert memory["minimum"] == MIN_MEMORY_GB and "exclusiveMinimum" not in memory
