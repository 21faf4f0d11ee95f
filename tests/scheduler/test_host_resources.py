"""CPU and host memory in every deploy request (issue 20): the API's `cpu` and `memory`, their
validation and defaults, the workload's requests and limits, and nodes whose CPU other teams' pods
hold (counted by inventory sync, as kube-scheduler's NodeResourcesFit counts them)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from scheduler.models import Deployment
from tests.scheduler.inventory import demo_cluster

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


# The validation table: what `cpu` and `memory` take (Kubernetes quantities; a number is cores or
# bytes, as in Kubernetes), how they are stored (canonical quantities), and what is refused.
ACCEPTED = [
    ("cpu", "8", "8"),
    ("cpu", "500m", "500m"),
    ("cpu", "1.5", "1500m"),
    ("cpu", 2, "2"),
    ("cpu", "0.1", "100m"),
    ("memory", "64Gi", "64Gi"),
    ("memory", "512Mi", "512Mi"),
    ("memory", "1G", "954Mi"),  # 10^9 bytes, rounded up to whole MiB
    ("memory", 1073741824, "1Gi"),  # a number is bytes
]
REFUSED = [
    ("cpu", "eight", "is not a Kubernetes quantity"),
    ("cpu", "8 cores", "is not a Kubernetes quantity"),
    ("cpu", "0", "greater than 0"),
    ("cpu", "-2", "greater than 0"),
    ("cpu", "1025", "at most 1024"),
    ("cpu", True, "Kubernetes quantity"),
    ("cpu", ["8"], "Kubernetes quantity"),
    ("memory", "64GB", "is not a Kubernetes quantity"),
    ("memory", "0Mi", "greater than 0"),
    ("memory", "17Ti", "at most 16384Gi"),
    ("memory", {"size": "1Gi"}, "Kubernetes quantity"),
]


@pytest.mark.parametrize(("field", "value", "stored"), ACCEPTED)
def test_cpu_and_memory_take_kubernetes_quantities(operator_api, cluster, field, value, stored):
    response = post(operator_api, **{field: value})

    assert response.status_code == 201, response.content
    assert response.json()[field] == stored


@pytest.mark.parametrize(("field", "value", "reason"), [("cpu", "1024", "insufficient CPU"),
                                                          ("memory", "16Ti", "insufficient memory")])
def test_the_largest_quantities_are_valid_requests_that_no_demo_node_fits(operator_api, cluster, field, value, reason):
    response = post(operator_api, **{field: value})

    assert response.status_code == 409  # valid (not a 400), but no node has 1,024 cores or 16 Ti free
    assert reason in response.json()["detail"]


@pytest.mark.parametrize(("field", "value", "message"), REFUSED)
def test_a_bad_quantity_is_a_400_naming_the_field_and_nothing_is_written(operator_api, cluster, field, value, message):
    response = post(operator_api, **{field: value})

    assert response.status_code == 400
    assert set(response.json()) == {field}
    assert message in " ".join(response.json()[field])
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(("workload_type", "cpu", "memory"), [
    ("inference", "4", "16Gi"), ("serving", "8", "32Gi"), ("training", "16", "128Gi"),
    ("development", "2", "8Gi"), ("batch", "4", "16Gi"),
])
def test_without_cpu_or_memory_the_workload_types_defaults_apply(operator_api, cluster, workload_type, cpu, memory):
    body = post(operator_api, workload_type=workload_type).json()

    assert (body["cpu"], body["memory"]) == (cpu, memory)


def test_the_workload_requests_and_is_limited_to_the_cpu_and_memory(operator_api, cluster):
    body = post(operator_api, cpu="8", memory="64Gi").json()

    deployment = Deployment.objects.get(pk=body["id"])
    assert (deployment.cpu_milli, deployment.host_memory_mib) == (8000, 65536)
    (placement,) = deployment.placements.all()
    assert (placement.cpu_milli, placement.host_memory_mib) == (8000, 65536)
    (manifest,) = [d for d in cluster.list_objects("Deployment") if d["metadata"]["name"] == placement.workload_name]
    resources = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "8", "memory": "64Gi"}
    assert {key: resources["limits"][key] for key in ("cpu", "memory")} == {"cpu": "8", "memory": "64Gi"}
    # The decision names what each replica asks of its node.
    matrix = operator_api.get(body["decision"]).json()["decisions"][0]["matrix"]
    assert (matrix["request"]["cpu_milli"], matrix["request"]["host_memory_mib"]) == (8000, 65536)


def test_a_node_whose_cpu_another_teams_pod_holds_is_filtered_and_the_matrix_says_why(operator_api, cluster):
    # Another team's CPU-only job (not gpuplane's, no GPU) takes 62 of a100-node-3's 64 cores.
    cluster.run_pod("analytics", "etl-0", "a100-node-3", resources={"cpu": 62})
    sync_inventory(cluster)
    node = Node.objects.get(name="a100-node-3")
    assert (node.cpu_allocatable_milli, node.cpu_requested_milli) == (64000, 62000)

    body = post(operator_api, cpu="4").json()

    assert body["placements"][0]["node"] != "a100-node-3"
    matrix = operator_api.get(body["decision"]).json()["decisions"][0]["matrix"]
    row = next(r for r in matrix["rows"] if r["node"] == "a100-node-3")
    assert (row["feasible"], row["reason"], row["detail"]) == (
        False, "insufficient CPU", "2000m CPU free < 4000m requested")
    assert matrix["diagnosis"]["rejected"]["insufficient CPU"] == 1
    # Feasible rows show the CPU and memory their node had free before this placement.
    chosen = next(r for r in matrix["rows"] if r["node"] == body["placements"][0]["node"])
    assert chosen["facts"]["cpu_free_milli"] == 64000
