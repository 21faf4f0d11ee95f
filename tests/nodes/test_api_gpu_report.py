"""`/api/v1/nodes/<name>/gpu-report/`: who may report a node's GPUs, what is checked, what is bound."""
from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from nodes.authentication import issue_agent_token
from nodes.models import GPU, Node, NodeGPUReport
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


def url(node: str = "n1") -> str:
    return f"/api/v1/nodes/{node}/gpu-report/"


def gpu(index: int, uuid: str, **fields: Any) -> dict[str, Any]:
    return {"index": index, "uuid": uuid, "product": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
            "mig_enabled": False, **fields}


@pytest.fixture
def n1(db) -> Node:
    return make_node("n1", gpu_count=2)


def bearer(node: Node) -> APIClient:
    _, key = issue_agent_token(node)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_the_nodes_agent_reports_and_its_rows_take_the_real_uuids(n1):
    response = bearer(n1).post(url(), {"gpus": [gpu(0, "GPU-real-0"), gpu(1, "GPU-real-1")]}, format="json")

    assert response.status_code == 200, response.content
    assert response.json() == {
        "changed": True, "revision": 1, "unknown_indexes": [], "conflicts": [],
        "bound": [{"index": 0, "from": "GPU-n1-0", "to": "GPU-real-0"}, {"index": 1, "from": "GPU-n1-1", "to": "GPU-real-1"}],
    }
    assert list(GPU.objects.order_by("index").values_list("uuid", flat=True)) == ["GPU-real-0", "GPU-real-1"]


def test_an_agent_may_report_only_its_own_node(n1):
    n2 = make_node("n2", gpu_count=1)

    response = bearer(n1).post(url("n2"), {"gpus": [gpu(0, "GPU-x")]}, format="json")

    assert response.status_code == 403 and "n1" in response.json()["detail"]
    assert not NodeGPUReport.objects.exists() and n2.gpus.get().uuid == "GPU-n2-0"


def test_an_agent_may_not_read_reports_nor_anything_else(n1):
    client = bearer(n1)
    assert client.get(url()).status_code == 403
    assert client.get("/api/v1/gpus/").status_code == 403


def test_operators_report_and_viewers_read(n1, operator, viewer, api):
    api.force_authenticate(viewer)
    assert api.post(url(), {"gpus": [gpu(0, "GPU-a")]}, format="json").status_code == 403
    assert api.get(url()).status_code == 404  # none yet
    api.force_authenticate(operator)
    assert api.post(url(), {"gpus": [gpu(0, "GPU-a")]}, format="json").status_code == 200
    assert api.post(url("n9"), {"gpus": [gpu(0, "GPU-b")]}, format="json").status_code == 404
    api.force_authenticate(viewer)

    stored = api.get(url()).json()

    assert (stored["node"], stored["revision"], stored["pending"]) == ("n1", 1, True)
    assert stored["gpus"][0]["uuid"] == "GPU-a"


def test_anonymous_is_401(n1, api):
    assert api.post(url(), {"gpus": []}, format="json").status_code == 401


@pytest.mark.parametrize(
    "gpus, field",
    [
        ([gpu(0, "GPU-a"), gpu(0, "GPU-b")], "gpus"),  # an index twice
        ([gpu(0, "GPU-a"), gpu(1, "GPU-a")], "gpus"),  # a UUID twice
        ([gpu(0, "GPU-a", mig_enabled=True, mig_instances=[
            {"profile": "3g.40gb", "start": 0, "size": 4}, {"profile": "2g.20gb", "start": 2, "size": 2}])], "gpus"),
        ([gpu(0, "GPU-a", mig_instances=[{"profile": "1g.10gb", "start": 0, "size": 1}])], "gpus"),  # MIG off
        ([gpu(0, "GPU-a", mig_enabled=True, mig_instances=[{"profile": "1g.10gb", "start": 7, "size": 2}])], "gpus"),
        ([gpu(0, "GPU-a", mig_enabled="yes")], "gpus"),
        ([gpu(0, "GPU-a", memory_total_mib=81559.0)], "gpus"),
        ([gpu(0, "GPU-a", colour="green")], "gpus"),
        ([gpu(64, "GPU-a")], "gpus"),
    ],
    ids=["index twice", "uuid twice", "overlapping instances", "instances without MIG", "past slice 8",
         "mig_enabled as text", "memory as a float", "unknown key", "index 64"],
)
def test_a_bad_report_is_a_400_naming_the_field_and_stores_nothing(n1, operator, api, gpus, field):
    api.force_authenticate(operator)

    response = api.post(url(), {"gpus": gpus}, format="json")

    assert response.status_code == 400 and field in response.json(), response.content
    assert not NodeGPUReport.objects.exists()
    assert list(GPU.objects.order_by("index").values_list("uuid", flat=True)) == ["GPU-n1-0", "GPU-n1-1"]


def test_it_is_documented_with_agent_tokens(tmp_path):
    import yaml
    from django.core.management import call_command
    from drf_spectacular.drainage import reset_generator_stats

    path = tmp_path / "schema.yaml"
    reset_generator_stats()
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    operation = yaml.safe_load(path.read_text())["paths"]["/api/v1/nodes/{name}/gpu-report/"]["post"]
    assert {"agentTokenAuth": []} in operation["security"]
    assert {"agentServiceAccountAuth": []} in operation["security"]
    assert set(operation["responses"]) == {"200", "400", "401", "403", "404", "503"}


def test_behind_the_https_redirect_an_agent_in_the_cluster_still_reaches_it(n1, settings):
    """The agents post to the web Service over plain http (gpuplane/production.py REDIRECT_EXEMPT)."""
    from gpuplane.production import REDIRECT_EXEMPT

    settings.SECURE_SSL_REDIRECT, settings.SECURE_REDIRECT_EXEMPT = True, REDIRECT_EXEMPT
    client = bearer(n1)

    assert client.post(url(), {"gpus": [gpu(0, "GPU-real-0")]}, format="json").status_code == 200
    assert client.post("/api/v1/telemetry/", {"node": "n1", "samples": []}, format="json").status_code == 201
    assert client.get("/api/v1/gpus/").status_code == 301  # everything else goes to https
