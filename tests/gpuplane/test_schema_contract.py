"""The schema allows what the API accepts and documents what it refuses (gpuplane/schema.py).

Schemathesis (test_schemathesis.py) checks this broadly; these are the precise cases it found,
each pinned on both sides: what the schema says, and what the API answers.
"""
from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def parameter(schema: dict, path: str, name: str) -> dict:
    (found,) = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == name]
    return found


def test_every_operation_with_parameters_or_a_body_documents_400_and_with_a_path_parameter_404(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            where = {p["in"] for p in operation.get("parameters", [])}
            if "query" in where or "requestBody" in operation:
                assert "400" in operation["responses"], (method, path)
            if "path" in where:
                assert "404" in operation["responses"], (method, path)
                assert "text/html" in operation["responses"]["404"]["content"], "a path the URLconf refuses: Django's page"


def test_paging_and_filter_bounds_are_in_the_schema(schema):
    assert parameter(schema, "/api/v1/nodes/", "limit")["schema"]["minimum"] == 1
    assert parameter(schema, "/api/v1/nodes/", "offset")["schema"]["minimum"] == 0
    assert parameter(schema, "/api/v1/nodes/", "limit")["schema"]["maximum"] == 10**18 - 1
    utilization = parameter(schema, "/api/v1/gpus/", "utilization_pct__gte")["schema"]
    assert (utilization["minimum"], utilization["maximum"]) == (0, 100)
    assert parameter(schema, "/api/v1/gpus/", "min_free_memory_mib")["schema"]["minimum"] == 0
    assert parameter(schema, "/api/v1/gpus/", "node")["schema"]["items"]["pattern"] == "^[^\\x00]*$"


def test_ordering_is_a_non_empty_list_of_the_whitelisted_fields(schema):
    ordering = parameter(schema, "/api/v1/deployments/", "ordering")
    assert ordering["schema"]["minItems"] == 1
    assert "-created_at" in ordering["schema"]["items"]["enum"]
    assert "bogus" not in ordering["schema"]["items"]["enum"]
    assert (ordering["style"], ordering["explode"]) == ("form", False)


def test_the_deploy_body_states_the_field_rules(schema):
    fields = schema["components"]["schemas"]["DeploymentCreateRequest"]["properties"] \
        if "DeploymentCreateRequest" in schema["components"]["schemas"] \
        else schema["components"]["schemas"]["DeploymentCreate"]["properties"]
    assert fields["name"]["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    # At least 1 MiB (capacity is counted in whole MiB), at most 4096 GB.
    assert (fields["memory_gb"]["minimum"], fields["memory_gb"]["maximum"]) == (1 / 1024, 4096)
    assert (fields["gpu_count"]["minimum"], fields["gpu_count"]["maximum"]) == (1, 16)
    assert fields["model"]["minLength"] == 1


@pytest.mark.parametrize("query, field", [
    ("/api/v1/nodes/?ordering=", "ordering"),
    ("/api/v1/nodes/?ordering=name,", "ordering"),
    ("/api/v1/nodes/?limit=", "limit"),
    ("/api/v1/nodes/?offset=", "offset"),
    ("/api/v1/audit-events/?at__gte=", "at__gte"),
    ("/api/v1/audit-events/?at__lt=", "at__lt"),
])
def test_an_empty_value_the_schema_forbids_is_a_400_naming_the_parameter(viewer_api, query, field):
    response = viewer_api.get(query)

    assert response.status_code == 400, response.content
    assert field in response.json()
