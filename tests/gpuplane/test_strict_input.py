"""Strict input on every API endpoint (gpuplane/strict_input.py): an unknown body field, a loose
integer or an unknown query parameter is a 400 naming it, never silently ignored.

The endpoints are taken from the URLconf (drf-spectacular's enumerator, the one the schema uses),
not from a hand-written list, so a new endpoint is covered the day it is added.
"""
from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from drf_spectacular.generators import EndpointEnumerator
from rest_framework import serializers
from rest_framework.test import APIClient

from consolidation.models import ConsolidationPlan
from gpuplane.strict_input import RejectUnknownFieldsMixin, StrictIntegerField
from nodes.api import telemetry_schema as telemetry
from nodes.models import GPU, Node, NodeGPUReport
from rollouts.models import RollingUpdate
from scheduler.api.serializers import DeploymentCreateSerializer
from scheduler.models import Deployment, NamespaceQuota, SharingPolicy
from tests.scheduler.inventory import demo_cluster

pytestmark = pytest.mark.django_db

WRITE_METHODS = {"POST", "PUT", "PATCH"}


def api_endpoints() -> list[tuple[str, str, Any]]:
    return [
        (path, method, callback)
        for path, _regex, method, callback in EndpointEnumerator().get_api_endpoints()
        if path.startswith("/api/v1/")
    ]


GET_ENDPOINTS = [(path, callback) for path, method, callback in api_endpoints() if method == "GET"]
LIST_ENDPOINTS = [(path, cb) for path, cb in GET_ENDPOINTS if (getattr(cb, "actions", None) or {}).get("get") == "list"]
WRITE_ENDPOINTS = [(path, method, cb) for path, method, cb in api_endpoints() if method in WRITE_METHODS]


@pytest.fixture
def admin_api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


@pytest.fixture
def objects(admin_api) -> dict[str, str]:
    """One of everything (a deployment through the API makes its placement, decision and audit events)."""
    demo_cluster()
    response = admin_api.post("/api/v1/deployments/", {"name": "chat", "model": "m", "memory_gb": 8}, format="json")
    assert response.status_code == 201, response.content
    gpu = GPU.objects.select_related("node").first()
    assert gpu is not None
    RollingUpdate.objects.create(name="ts4", config={"mode": "timeslice", "replicas": 4, "mig_layout": None})
    ConsolidationPlan.objects.create(expires_at=timezone.now() + timedelta(hours=1))
    NodeGPUReport.objects.create(node=gpu.node, gpus=[], reported_at=timezone.now(), changed_at=timezone.now())
    SharingPolicy.objects.create(name="all-mps", strategy="mps")
    NamespaceQuota.objects.create(namespace="ml", max_gpu_milli=1000)
    return {"name": gpu.node.name, "uuid": gpu.uuid}


def concrete(path: str, callback: Any, objects: dict[str, str]) -> str:
    """The path with its parameters filled in with objects that exist."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in objects:
            return objects[name]
        model = callback.cls().get_queryset().model  # {pk} / {id}: the view's own model
        return str(model.objects.order_by("pk").values_list("pk", flat=True).first())
    return re.sub(r"\{(\w+)\}", value, path)


def test_the_enumeration_finds_the_endpoints_it_must_cover():
    # A guard against a vacuous pass: the lists below are not empty and hold the known endpoints.
    assert {"/api/v1/nodes/", "/api/v1/gpus/", "/api/v1/partitions/", "/api/v1/deployments/",
            "/api/v1/audit-events/"} <= {path for path, _cb in LIST_ENDPOINTS}
    assert {("/api/v1/deployments/", "POST"), ("/api/v1/telemetry/", "POST"),
            ("/api/v1/auth/token/", "POST")} <= {(path, method) for path, method, _ in WRITE_ENDPOINTS}


@pytest.mark.parametrize(("path", "callback"), GET_ENDPOINTS, ids=[path for path, _cb in GET_ENDPOINTS])
def test_every_read_endpoint_answers_400_naming_an_unknown_query_parameter(admin_api, objects, path, callback):
    url = concrete(path, callback, objects)
    assert admin_api.get(url).status_code == 200  # the object exists: a 400 below is about the parameter

    response = admin_api.get(url, {"colour": "blue"})

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["colour"]
    assert response.json()["colour"][0].startswith("Unknown query parameter: colour")


@pytest.mark.parametrize(("path", "callback"), LIST_ENDPOINTS, ids=[path for path, _cb in LIST_ENDPOINTS])
def test_every_list_endpoint_keeps_the_parameters_drf_reads(admin_api, objects, path, callback):
    ordering = callback.cls.ordering_fields[0]

    response = admin_api.get(path, {"limit": 1, "offset": 0, "ordering": f"-{ordering}", "format": "json"})

    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) <= 1


def test_a_filter_of_the_endpoint_is_not_unknown(admin_api, objects):
    response = admin_api.get("/api/v1/deployments/", {"status": "placed", "namespace": "default"})

    assert response.status_code == 200, response.content
    assert response.json()["count"] == 1


@pytest.mark.parametrize(("path", "parameter"), [
    ("/api/v1/nodes/", "ready"), ("/api/v1/nodes/", "sharing_mode"), ("/api/v1/deployments/", "status"),
    ("/api/v1/rollouts/", "status"),
])
def test_an_empty_yes_no_or_choice_filter_is_a_400_not_every_row(admin_api, objects, path, parameter):
    response = admin_api.get(path, {parameter: ""})

    assert response.status_code == 400, response.content
    assert "leave the parameter out" in response.json()[parameter][0]


def test_an_empty_free_text_filter_is_still_a_value(admin_api, objects):
    response = admin_api.get("/api/v1/nodes/", {"q": "", "gpu_model": ""})

    assert response.status_code == 200, response.content


@pytest.mark.parametrize(("path", "method", "callback"), WRITE_ENDPOINTS, ids=[f"{m} {p}" for p, m, _ in WRITE_ENDPOINTS])
def test_every_writable_endpoint_answers_400_naming_an_unknown_body_field(admin_api, objects, path, method, callback):
    path = concrete(path, callback, objects)
    response = getattr(admin_api, method.lower())(path, {"replica": 3}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["replica"][0].startswith("Unknown field: replica is not a field of this request")


@pytest.mark.parametrize(("path", "method", "callback"), WRITE_ENDPOINTS, ids=[f"{m} {p}" for p, m, _ in WRITE_ENDPOINTS])
def test_every_writable_endpoint_answers_400_naming_an_unknown_query_parameter(admin_api, objects, path, method, callback):
    path = concrete(path, callback, objects)
    response = getattr(admin_api, method.lower())(f"{path}?dry_run=1", {}, format="json")

    assert response.status_code == 400, response.content
    assert "dry_run" in response.json()


def test_a_valid_deploy_with_a_misspelt_field_is_refused_and_nothing_is_stored(admin_api, objects):
    before = Deployment.objects.count()

    response = admin_api.post(
        "/api/v1/deployments/", {"name": "chat2", "model": "m", "memory_gb": 8, "replica": 3}, format="json"
    )

    assert response.status_code == 400
    assert set(response.json()) == {"replica"}
    assert "accepted fields:" in response.json()["replica"][0] and "replicas" in response.json()["replica"][0]
    assert Deployment.objects.count() == before


# ---- strict integers -------------------------------------------------------------------------------

DEPLOY_INTEGERS = [
    name for name, field in DeploymentCreateSerializer().fields.items() if isinstance(field, serializers.IntegerField)
]
LOOSE_INTEGERS = ["2.0", 2.0, 2.5, "2.5", True, False, "two", "", " 2", "1e1"]


@pytest.mark.parametrize("field", DEPLOY_INTEGERS)
@pytest.mark.parametrize("value", LOOSE_INTEGERS, ids=repr)
def test_the_deploy_api_refuses_anything_but_a_whole_number(admin_api, field, value):
    response = admin_api.post(
        "/api/v1/deployments/", {"name": "chat", "model": "m", "memory_gb": 8, field: value}, format="json"
    )

    assert response.status_code == 400, response.content
    assert "whole number" in response.json()[field][0]
    assert not Deployment.objects.exists()


def test_the_deploy_integers_are_found():
    assert {"gpu_count", "replicas", "latency_slo_ms"} <= set(DEPLOY_INTEGERS)


@pytest.mark.parametrize(("value", "expected"), [(2, 2), ("2", 2), (-3, -3), ("-3", -3), (0, 0)])
def test_a_whole_number_or_its_digits_from_a_form_post_is_accepted(value, expected):
    assert StrictIntegerField().run_validation(value) == expected


def _request_serializers() -> list[type]:
    found: list[type] = []
    pending = list(RejectUnknownFieldsMixin.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _integer_fields(serializer: serializers.Serializer) -> list[tuple[str, serializers.Field]]:
    fields = []
    for name, field in serializer.fields.items():
        child = getattr(field, "child", None)
        if isinstance(child, serializers.Serializer):
            fields.extend((f"{name}.{sub}", f) for sub, f in _integer_fields(child))
        elif isinstance(field, serializers.IntegerField) and not field.read_only:
            fields.append((name, field))
    return fields


def test_every_integer_of_every_request_body_is_strict():
    strict = (StrictIntegerField, telemetry.StrictIntegerField)
    checked = {}
    for cls in _request_serializers():
        if cls.__module__.startswith("tests."):
            continue
        for name, field in _integer_fields(cls()):
            checked[f"{cls.__name__}.{name}"] = isinstance(field, strict)
    assert checked and all(checked.values()), checked
    assert "TelemetryBatchSerializer.samples.memory_used_mib" in checked


# ---- labels in a form-encoded deploy ---------------------------------------------------------------


def test_a_form_encoded_deploy_keeps_its_labels_given_as_lines(admin_api, objects):
    response = admin_api.post(
        "/api/v1/deployments/", {"name": "chat2", "model": "m", "memory_gb": "8", "labels": "team=search\ntier=canary"}
    )

    assert response.status_code == 201, response.content
    assert response.json()["labels"] == {"team": "search", "tier": "canary"}
    assert Deployment.objects.get(name="chat2").labels == {"team": "search", "tier": "canary"}


def test_a_form_encoded_deploy_keeps_labels_in_drf_notation(admin_api, objects):
    response = admin_api.post("/api/v1/deployments/", {"name": "chat2", "model": "m", "memory_gb": "8", "labels.team": "a"})

    assert response.status_code == 201, response.content
    assert response.json()["labels"] == {"team": "a"}


def test_a_form_encoded_deploy_with_a_bad_label_line_says_which_line(admin_api, objects):
    response = admin_api.post("/api/v1/deployments/", {"name": "chat2", "model": "m", "memory_gb": "8", "labels": "a=1\nnope"})

    assert response.status_code == 400
    assert response.json()["labels"] == ["Line 2: write one label a line as key=value."]


def test_json_labels_must_still_be_an_object(admin_api, objects):
    response = admin_api.post(
        "/api/v1/deployments/", {"name": "chat2", "model": "m", "memory_gb": 8, "labels": "team=search"}, format="json"
    )

    assert response.status_code == 400
    assert "object" in response.json()["labels"][0]
    assert not Node.objects.filter(name="chat2").exists()
