"""The OpenAPI schema (`/api/schema/`) and Swagger UI (`/api/docs/`).

The schema must generate without a single warning (each warning is a guessed type that client
generators would get wrong) and be valid OpenAPI. Both pages need the same login and role as the
API; Swagger UI's assets are served by gpuplane itself (drf-spectacular-sidecar), never a CDN.
"""
from __future__ import annotations

import re

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from drf_spectacular.drainage import reset_generator_stats
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema_file(tmp_path_factory) -> dict:
    """The schema written by `manage.py spectacular --validate --fail-on-warn` (raises on a warning)."""
    path = tmp_path_factory.mktemp("schema") / "schema.yaml"
    reset_generator_stats()  # warnings are counted process-wide; count only this run's
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())


def test_it_generates_a_valid_schema_without_warnings(schema_file):
    assert schema_file["openapi"].startswith("3.")
    assert schema_file["info"]["title"] == "gpuplane API"


def test_it_documents_the_inventory_endpoints(schema_file):
    paths = schema_file["paths"]
    for path in [
        "/api/v1/nodes/",
        "/api/v1/nodes/{name}/",
        "/api/v1/gpus/",
        "/api/v1/gpus/{uuid}/",
        "/api/v1/partitions/",
        "/api/v1/partitions/{id}/",
        "/api/v1/auth/token/",
    ]:
        assert path in paths, path
    # Read-only: list and retrieve only.
    assert set(paths["/api/v1/nodes/"]) == {"get"}
    assert set(paths["/api/v1/nodes/{name}/"]) == {"get"}


def test_it_documents_filters_and_paging_on_the_node_list(schema_file):
    parameters = {p["name"]: p for p in schema_file["paths"]["/api/v1/nodes/"]["get"]["parameters"]}

    expected = {"q", "gpu_model", "sharing_mode", "ready", "cordoned", "has_free_gpu", "limit", "offset", "ordering"}
    assert expected <= set(parameters)
    assert parameters["ready"]["schema"] == {"type": "boolean"}
    modes = parameters["sharing_mode"]["schema"]["items"]["enum"]
    assert modes == ["exclusive", "mig", "mps", "mps-weighted", "timeslice"]
    assert "utilization_pct" in parameters["ordering"]["description"]


def test_it_types_derived_and_json_fields(schema_file):
    node = schema_file["components"]["schemas"]["Node"]["properties"]

    assert node["utilization_pct"]["type"] == "number" and node["utilization_pct"]["nullable"] is True
    assert node["gpus_allocated"]["type"] == "integer"
    assert node["labels"]["additionalProperties"] == {"type": "string"}
    assert node["taints"]["items"] == {"$ref": "#/components/schemas/Taint"}
    partition = schema_file["components"]["schemas"]["Partition"]["properties"]
    assert partition["free"]["type"] == "boolean"
    assert partition["node"]["type"] == "string"


def test_it_declares_token_and_session_auth(schema_file):
    assert set(schema_file["components"]["securitySchemes"]) == {"tokenAuth", "cookieAuth", "agentTokenAuth",
                                                                  "agentServiceAccountAuth"}


@pytest.mark.parametrize("url", ["/api/schema/", "/api/docs/"])
def test_it_hides_schema_and_docs_from_anonymous_users(api, url):
    assert api.get(url).status_code == 401


def test_it_serves_the_schema_to_a_viewer(viewer_api):
    response = viewer_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    assert "/api/v1/partitions/" in response.json()["paths"]


def test_it_hides_the_schema_from_a_user_without_a_role(api, outsider):
    api.force_authenticate(outsider)

    assert api.get("/api/schema/").status_code == 403


def test_it_renders_swagger_ui_for_a_logged_in_user_from_local_assets(viewer):
    client = APIClient()
    client.force_login(viewer)

    response = client.get("/api/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "SwaggerUIBundle" in html
    assert "/api/schema/" in html
    for cdn in ("cdn.jsdelivr.net", "unpkg.com", "cdnjs", "googleapis"):
        assert cdn not in html
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(asset.endswith("swagger-ui-bundle.js") for asset in assets)
    for asset in assets:
        assert asset.startswith("/static/"), asset
        # Each asset is really there to be served (whitenoise serves from the finders).
        assert finders.find(asset.removeprefix("/static/")), asset
