"""`POST /api/v1/telemetry/`: who may post, what is stored, 207s naming each bad sample (its neighbours
stored), 400s for bad batches (never 500s)."""
from __future__ import annotations

from datetime import timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone
from drf_spectacular.drainage import reset_generator_stats
from knox.models import AuthToken
from rest_framework.test import APIClient

from nodes.api.telemetry_schema import TelemetryBatchSerializer, TelemetrySampleSerializer
from nodes.authentication import issue_agent_token
from nodes.models import GPUSample, Node
from nodes.telemetry.batch import BATCH_KEYS, SAMPLE_KEYS
from nodes.telemetry.samples import METRIC_RANGES
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

URL = "/api/v1/telemetry/"


@pytest.fixture
def n1(db) -> Node:
    return make_node("n1", gpu_count=2)


@pytest.fixture
def n2(db) -> Node:
    return make_node("n2", gpu_count=1)


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def iso(seconds_ago: float = 0) -> str:
    return (timezone.now() - timedelta(seconds=seconds_ago)).isoformat()


def sample(uuid: str = "GPU-n1-0", seconds_ago: float = 0, **overrides: Any) -> dict[str, Any]:
    return {
        "gpu_uuid": uuid,
        "ts": iso(seconds_ago),
        "utilization_pct": 42.5,
        "memory_used_mib": 2048,
        "memory_total_mib": 81920,
        "power_w": 250.0,
        "temperature_c": 61.0,
        **overrides,
    }


def batch(*samples: dict[str, Any], node: str = "n1") -> dict[str, Any]:
    return {"node": node, "samples": list(samples) or [sample("GPU-n1-0"), sample("GPU-n1-1")]}


def post(client: APIClient, body: Any):  # type: ignore[no-untyped-def]
    return client.post(URL, body, format="json")


# --- storing ------------------------------------------------------------------------------------


def test_it_stores_a_batch_and_answers_201_with_counts(operator_api, n1):
    response = post(operator_api, batch())

    assert response.status_code == 201
    assert response.json() == {"stored": 2, "duplicates": 0}
    assert set(GPUSample.objects.values_list("gpu__uuid", "source")) == {("GPU-n1-0", "api"), ("GPU-n1-1", "api")}


def test_it_shows_the_latest_values_on_the_gpu_in_the_api(operator_api, n1):
    post(operator_api, batch(sample(seconds_ago=30, utilization_pct=10.0), sample(utilization_pct=77.0)))

    gpu = operator_api.get("/api/v1/gpus/GPU-n1-0/").json()

    assert gpu["utilization_pct"] == 77.0
    assert gpu["memory_used_mib"] == 2048
    assert gpu["power_w"] == 250.0
    assert gpu["temperature_c"] == 61.0
    assert gpu["sampled_at"] is not None


def test_it_counts_a_reposted_batch_as_duplicates(operator_api, n1):
    body = batch()
    assert post(operator_api, body).json() == {"stored": 2, "duplicates": 0}

    response = post(operator_api, body)

    assert response.status_code == 201
    assert response.json() == {"stored": 0, "duplicates": 2}
    assert GPUSample.objects.count() == 2


def test_it_accepts_samples_with_metrics_missing_or_null(operator_api, n1):
    bare = {"gpu_uuid": "GPU-n1-0", "ts": iso()}
    nulls = {"gpu_uuid": "GPU-n1-1", "ts": iso(), "utilization_pct": None, "power_w": None, "sm_clock_mhz": None}

    response = post(operator_api, batch(bare, nulls))

    assert response.status_code == 201
    assert list(GPUSample.objects.values_list("utilization_pct", "power_w", "memory_used_mib").order_by().distinct()) == [
        (None, None, None)
    ]


def test_it_accepts_whole_numbers_for_float_fields(operator_api, n1):
    response = post(operator_api, batch(sample(utilization_pct=50, memory_used_mib=1024)))

    assert response.status_code == 201
    assert GPUSample.objects.get().utilization_pct == 50.0


def test_it_refuses_integral_floats_for_integers(operator_api, n1):
    # Strict integers everywhere (gpuplane/strict_input.py): 1024.0 where a count belongs is a client bug.
    response = post(operator_api, batch(sample(memory_used_mib=1024.0)))

    assert response.status_code == 400
    assert "whole number" in str(response.json()["samples"]["0"]["memory_used_mib"])
    assert not GPUSample.objects.exists()


def test_it_reads_offsets_and_stores_utc(operator_api, n1):
    taken = (timezone.now() - timedelta(seconds=30)).replace(microsecond=0)
    local = taken.astimezone(dt_timezone(timedelta(hours=2)))

    response = post(operator_api, batch(sample(ts=local.isoformat())))

    assert response.status_code == 201
    assert local.isoformat().endswith("+02:00")
    stored = GPUSample.objects.get().ts
    assert stored == taken
    assert stored.utcoffset() == timedelta(0)


# --- who may post ---------------------------------------------------------------------------------


def test_it_answers_401_to_anonymous_posts(api, n1):
    response = post(api, batch())

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="gpuplane-agent"'


@pytest.mark.parametrize("role_fixture", ["viewer", "outsider"])
def test_it_refuses_users_below_operator(api, n1, role_fixture, request):
    api.force_authenticate(request.getfixturevalue(role_fixture))

    assert post(api, batch()).status_code == 403
    assert GPUSample.objects.count() == 0


def test_it_lets_an_admin_post(api, n1, admin_user):
    api.force_authenticate(admin_user)

    assert post(api, batch()).status_code == 201


def test_it_takes_a_users_api_token_beside_agent_tokens(api, n1, operator):
    api.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=operator)[1]}")

    assert post(api, batch()).status_code == 201


def test_it_lets_an_agent_post_for_its_own_node(api, n1):
    _, key = issue_agent_token(n1)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    response = post(api, batch())

    assert response.status_code == 201
    assert set(GPUSample.objects.values_list("source", flat=True)) == {"agent"}


def test_it_refuses_an_agent_posting_for_another_node(api, n1, n2):
    _, key = issue_agent_token(n1)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    response = post(api, batch(sample("GPU-n2-0"), node="n2"))

    assert response.status_code == 403
    assert "n1" in response.json()["detail"]
    assert GPUSample.objects.count() == 0


def test_it_refuses_an_agent_smuggling_another_nodes_gpu_into_its_batch(api, n1, n2):
    _, key = issue_agent_token(n1)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    response = post(api, batch(sample("GPU-n1-0"), sample("GPU-n2-0")))

    assert response.status_code == 207
    assert response.json() == {
        "stored": 1, "duplicates": 0, "refused": 1, "retry": [],  # never worth sending again
        "samples": {"1": {"gpu_uuid": ["GPU 'GPU-n2-0' is not a GPU of node 'n1'."]}},
    }
    assert list(GPUSample.objects.values_list("gpu__uuid", flat=True)) == ["GPU-n1-0"]


def test_it_allows_only_post(operator_api, n1):
    assert operator_api.get(URL).status_code == 405


def test_it_rejects_more_samples_than_the_batch_limit_naming_it(operator_api, n1, settings):
    settings.TELEMETRY_MAX_BATCH = 5000
    too_many = [sample(seconds_ago=i) for i in range(5001)]

    response = post(operator_api, batch(*too_many))

    assert response.status_code == 400
    assert response.json() == {"samples": ["At most 5000 samples per batch (TELEMETRY_MAX_BATCH); got 5001."]}
    assert GPUSample.objects.count() == 0


def test_it_follows_the_batch_limit_setting(operator_api, n1, settings):
    settings.TELEMETRY_MAX_BATCH = 2

    assert post(operator_api, batch(sample(seconds_ago=60), sample(seconds_ago=30), sample())).status_code == 400
    assert post(operator_api, batch(sample(seconds_ago=30), sample())).status_code == 201


@pytest.mark.parametrize(
    "raw, content_type, status",
    [
        ('{"node": "n1", "samples": [', "application/json", 400),  # truncated JSON
        ('{"node": "n1", "samples": [{"gpu_uuid": "GPU-n1-0", "ts": "%s", "power_w": NaN}]}', "application/json", 400),
        ('{"node": "n1", "samples": [{"gpu_uuid": "GPU-n1-0", "ts": "%s", "power_w": Infinity}]}', "application/json", 400),
        ('{"node": "n1", "samples": [{"gpu_uuid": "GPU-n1-0", "ts": "%s", "power_w": -Infinity}]}', "application/json", 400),
        # Python's json reads 1e999 as inf without complaint: the field must refuse it.
        ('{"node": "n1", "samples": [{"gpu_uuid": "GPU-n1-0", "ts": "%s", "temperature_c": 1e999}]}', "application/json", 400),
        ("node=n1&samples=x", "application/x-www-form-urlencoded", 415),
        # Nested deeper than Python's JSON decoder can follow: a RecursionError once made this a 500.
        ("[" * 100_000 + "]" * 100_000, "application/json", 400),
        ('{"node": "n1", "samples": ' + '{"a":' * 50_000 + "1" + "}" * 50_000 + "}", "application/json", 400),
    ],
)
def test_it_refuses_bodies_that_are_not_clean_json(operator_api, n1, raw, content_type, status):
    body = raw % iso() if "%s" in raw else raw

    response = operator_api.generic("POST", URL, body, content_type=content_type)

    assert response.status_code == status
    assert GPUSample.objects.count() == 0


# --- OpenAPI --------------------------------------------------------------------------------------


def test_the_schema_documents_exactly_what_the_bulk_parser_takes():
    sample_fields = TelemetrySampleSerializer().fields
    assert set(sample_fields) == SAMPLE_KEYS
    assert set(TelemetryBatchSerializer().fields) == BATCH_KEYS
    for name, (low, high) in METRIC_RANGES.items():
        assert (sample_fields[name].min_value, sample_fields[name].max_value) == (low, high), name


def test_it_is_documented_in_the_schema_without_warnings(tmp_path):
    path = tmp_path / "schema.yaml"
    reset_generator_stats()
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    schema = yaml.safe_load(path.read_text())

    operation = schema["paths"]["/api/v1/telemetry/"]["post"]
    assert set(schema["paths"]["/api/v1/telemetry/"]) == {"post"}
    assert {"agentTokenAuth": []} in operation["security"]
    assert {"agentServiceAccountAuth": []} in operation["security"]
    assert {"tokenAuth": []} in operation["security"]
    assert set(operation["responses"]) == {"201", "207", "400", "401", "403", "503"}
    partial = operation["responses"]["207"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert {"stored", "refused", "samples", "retry"} <= set(schema["components"]["schemas"][partial]["properties"])
    batch_schema = schema["components"]["schemas"]["TelemetryBatch"]
    assert batch_schema["properties"]["samples"]["maxItems"] == 5000
    sample_schema = schema["components"]["schemas"]["TelemetrySample"]["properties"]
    assert sample_schema["utilization_pct"]["maximum"] == 100
    assert sample_schema["ts"]["format"] == "date-time"
    assert {"memory_reserved_mib", "power_limit_w", "processes"} <= set(sample_schema)
    # Agent tokens are accepted by telemetry only: the inventory does not list them.
    assert {"agentTokenAuth": []} not in schema["paths"]["/api/v1/nodes/"]["get"]["security"]
    assert {"agentServiceAccountAuth": []} not in schema["paths"]["/api/v1/nodes/"]["get"]["security"]
    assert schema["components"]["securitySchemes"]["agentTokenAuth"]["scheme"] == "bearer"
    assert schema["components"]["securitySchemes"]["agentServiceAccountAuth"]["bearerFormat"] == "JWT"
