"""Must-show 1: the seed's scenarios and MPS examples on the demo cluster, end to end.

Each runs the whole pipeline (inventory rows -> snapshot -> decision -> reservation -> workload
on the simulated cluster) with the demo loaded by ``nodes.demo.load_demo_cluster``; telemetry is
set on the GPU rows as each scenario describes.
"""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from nodes.models import GPU, Partition
from scheduler import services
from scheduler.choices import DeploymentStatus
from scheduler.models import Deployment
from scheduler.services import DeploySpec, NoCapacity
from tests.scheduler.inventory import check_invariants, demo_cluster, set_utilization

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    return demo_cluster()


def row(matrix: dict, node: str) -> dict:
    return next(r for r in matrix["rows"] if r["node"] == node)


def test_scenario_1_a_40_gb_high_priority_tight_slo_model_gets_an_exclusive_h100(cluster):
    deployment = services.deploy(
        DeploySpec(name="llm", model="llama-3-70b", memory_gb=40, priority="high", latency_slo_ms=100),
        cluster=cluster,
    )

    (placement,) = deployment.placements.select_related("node")
    assert placement.node.gpu_model == "H100-SXM5-80GB"
    assert placement.sharing == "exclusive" and placement.share_milli == 1000
    (held,) = Partition.objects.filter(hold__placement=placement)
    assert held.kind == "exclusive" and held.pod == ""
    matrix = deployment.decisions.get().matrix
    assert matrix["classification"]["latency_override"] is True
    assert matrix["node"] == placement.node.name


def test_scenario_1_through_the_api(cluster, operator, settings):
    client = APIClient()
    client.force_authenticate(operator)

    response = client.post("/api/v1/deployments/", {
        "name": "llm", "model": "llama-3-70b", "memory_gb": 40, "priority": "high", "latency_slo_ms": 100,
    }, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    (placement,) = body["placements"]
    assert placement["gpu_model"] == "H100-SXM5-80GB"
    assert (placement["sharing"], placement["share_percent"]) == ("exclusive", 100.0)
    assert body["decision"].endswith(f"/api/v1/deployments/{body['id']}/decision/")
    matrix = client.get(body["decision"]).json()["decisions"][0]["matrix"]
    assert row(matrix, placement["node"])["rank"] == 1


def test_scenario_2_an_8_gb_low_priority_batch_model_gets_half_an_a100_over_mps(cluster):
    deployment = services.deploy(
        DeploySpec(name="embed", model="bge-large", memory_gb=8, priority="low", workload_type="batch"),
        cluster=cluster,
    )

    (placement,) = deployment.placements.select_related("node")
    assert placement.node.gpu_model == "A100-SXM4-40GB"
    assert placement.sharing in ("mps", "mps-weighted")
    assert placement.share_milli == 500
    assert placement.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    (held,) = Partition.objects.filter(hold__placement=placement)
    assert held.share_milli == 500


def test_scenario_3_with_h100s_busy_and_a100s_at_60_percent_the_least_utilized_a100_wins(cluster):
    set_utilization("h100-", 95.0)
    set_utilization("a100-", 60.0)
    set_utilization("a100-node-3", 35.0)  # the one lower A100 (MPS R=2: it can give 50 %)

    deployment = services.deploy(DeploySpec(name="chat", model="mistral-7b", memory_gb=8), cluster=cluster)

    (placement,) = deployment.placements.select_related("node")
    assert placement.node.name == "a100-node-3"
    matrix = deployment.decisions.get().matrix
    h100_rows = {r["node"]: r["reason"] for r in matrix["rows"] if r["node"].startswith("h100-")}
    # Every H100 node is turned away by utilization, h100-node-4 (time-slicing R=4) too:
    # time-slicing is sized by memory, so its replicas could hold 8 GB (the medium class's 50 %
    # is a default for MPS only).
    assert h100_rows == {"h100-node-1": "utilization >= 90%", "h100-node-2": "utilization >= 90%",
                         "h100-node-3": "utilization >= 90%", "h100-node-4": "utilization >= 90%"}
    least = {r["node"]: next(s["raw"] for s in r["scores"] if s["plugin"] == "LeastUtilized")
             for r in matrix["rows"] if r["feasible"]}
    assert least["a100-node-3"] == max(least.values())


def test_the_weighted_gpu_of_50_plus_25_takes_a_25_percent_share_then_refuses_another(cluster):
    # a100-node-4 GPU 0 holds 50 % + 25 % (demo pods); fill GPUs 1-3 so only GPU 0 has room.
    services.deploy(DeploySpec(name="filler", model="m", memory_gb=20, sharing="mps-weighted", replicas=3),
                    cluster=cluster)
    gpu0 = GPU.objects.get(node__name="a100-node-4", index=0)
    assert gpu0.allocated_milli == 750

    quarter = services.deploy(DeploySpec(name="quarter", model="phi-3", memory_gb=2, sharing="mps-weighted"),
                              cluster=cluster)

    (placement,) = quarter.placements.select_related("node")
    assert (placement.node.name, placement.gpu_indexes, placement.share_milli) == ("a100-node-4", [0], 250)
    assert placement.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    gpu0.refresh_from_db()
    assert gpu0.allocated_milli == 1000
    assert sorted(Partition.objects.filter(gpu=gpu0).values_list("share_milli", flat=True)) == [250, 250, 500]

    with pytest.raises(NoCapacity) as raised:
        services.deploy(DeploySpec(name="another", model="phi-3", memory_gb=2, sharing="mps-weighted",
                                   allow_default_scheduler=False), cluster=cluster)
    assert "1 node has insufficient free GPU share" in raised.value.message
    assert row(raised.value.decision, "a100-node-4")["reason"] == "insufficient free GPU share"
    check_invariants()


def test_a_uniform_mps_node_with_r_4_refuses_a_50_percent_request_and_says_why(cluster):
    deployment = services.deploy(DeploySpec(name="half", model="mistral-7b", memory_gb=8, sharing="mps"),
                                 cluster=cluster)

    matrix = deployment.decisions.get().matrix
    refused = row(matrix, "a100-node-2")  # MPS R=4
    assert not refused["feasible"]
    assert refused["reason"] == "MPS share too small"
    assert refused["detail"] == "MPS with R=4 gives each client 25%; a 50% request needs R <= 2"
    assert deployment.placements.get().node.sharing_replicas == 2  # placed on an R=2 node instead


def test_the_whole_demo_fills_up_and_then_answers_409_without_over_allocating(cluster):
    placed = 0
    with pytest.raises(NoCapacity):
        for number in range(100):
            services.deploy(DeploySpec(name=f"w{number}", model="m", memory_gb=30, allow_default_scheduler=False),
                            cluster=cluster)
            placed += 1
    assert placed > 10
    assert all(d.status == DeploymentStatus.PLACED for d in Deployment.objects.all())
    check_invariants()
