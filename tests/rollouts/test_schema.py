"""The OpenAPI schema documents the rollouts API as it answers."""
from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def test_create_documents_201_400_409_and_a_json_only_body(schema):
    create = schema["paths"]["/api/v1/rollouts/"]["post"]
    assert set(create["responses"]) == {"201", "400", "409"}
    assert list(create["requestBody"]["content"]) == ["application/json"]
    body = schema["components"]["schemas"]["RolloutCreate"]
    # nodes or node_selector: one of the two (OpenAPI 3.0 cannot say so; each field's description does)
    assert set(body["required"]) == {"name", "config"}
    assert {"nodes", "node_selector"} <= set(body["properties"])
    assert body["properties"]["max_unavailable"]["minimum"] == 1


def test_the_preview_and_reads_are_documented(schema):
    assert set(schema["paths"]["/api/v1/rollouts/preview/"]["post"]["responses"]) == {"200", "400"}
    assert "get" in schema["paths"]["/api/v1/rollouts/{id}/"]
    rollout = schema["components"]["schemas"]["RollingUpdate"]["properties"]
    assert {"id", "status", "progress_percent", "nodes"} <= set(rollout)


def test_the_preview_schema_names_its_parts_as_rollout_shapes(schema):
    names = set(schema["components"]["schemas"])
    assert {"RolloutPreview", "RolloutBatch", "RolloutMove", "RolloutRefusal", "RolloutSkipped"} <= names
    batch = schema["components"]["schemas"]["RolloutBatch"]["properties"]
    assert {"nodes", "moves", "capacity_dip_milli", "capacity_dip_percent"} <= set(batch)
