"""409 answers that help (API): the dominant reason first, a suggestion that works on this
cluster (following it succeeds), the user's units, and the failing replica named with the
earlier replicas' tentative reservations released (nothing stored, nothing held)."""
from __future__ import annotations

import pytest
from django.db.models import Max
from rest_framework.test import APIClient

from nodes.models import GPU
from scheduler.core.diagnosis import HARDWARE_MEMORY, HELD_BY_REQUEST
from scheduler.core.wording import gb
from scheduler.models import Decision, Deployment, Placement
from tests.scheduler.inventory import capacity_state, demo_cluster

pytestmark = pytest.mark.django_db

BODY = {"name": "big", "model": "llama-70b"}


@pytest.fixture
def cluster():
    return demo_cluster()


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def post(client: APIClient, **fields):
    return client.post("/api/v1/deployments/", {**BODY, **fields}, format="json")


def _texts(body: dict) -> list[str]:
    """Everything user-facing in a 409: the detail, the suggestion and every row's words."""
    rows = body["decision"]["rows"]
    suggestion = body["suggestion"] or {}
    return [body["detail"], suggestion.get("text", ""), *(row["reason"] for row in rows),
            *(row["detail"] for row in rows)]


def _largest_gpu() -> str:
    return gb(GPU.objects.aggregate(largest=Max("memory_mib"))["largest"])


def test_a_request_no_gpu_can_hold_leads_with_memory_and_suggests_more_gpus_that_work(operator_api, cluster):
    before = capacity_state()

    response = post(operator_api, memory_gb=120, gpu_count=1)

    assert response.status_code == 409
    body = response.json()
    assert body["reason"] == HARDWARE_MEMORY
    assert body["detail"].startswith("No GPU of this cluster can hold 120 GB. Suggestion: ")
    assert body["suggestion"] == {
        "text": f"the largest GPU has {_largest_gpu()}: ask for 2 GPUs per replica (60 GB on each)",
        "changes": {"gpu_count": 2},
    }
    # Reasons that do not matter are gone: no sharing mode would make a GPU bigger.
    assert body["decision"]["diagnosis"]["rejected"] == {HARDWARE_MEMORY: 12}
    for text in _texts(body):
        assert "MPS" not in text and "time-slice" not in text and "fewer GPUs" not in text
        assert "MiB" not in text and "milli" not in text
    need = body["decision"]["need"]
    assert (need["memory_gb"], need["memory_per_gpu_gb"], need["share_percent"]) == (120, 120, 100)
    assert not Deployment.objects.exists() and capacity_state() == before

    followed = post(operator_api, memory_gb=120, **body["suggestion"]["changes"])

    assert followed.status_code == 201, followed.json()
    assert [len(p["gpus"]) for p in followed.json()["placements"]] == [2]


def test_a_shared_only_request_is_told_to_let_the_scheduler_choose_and_that_works(operator_api, cluster):
    asked = {"memory_gb": 120, "sharing": "mps"}
    body = post(operator_api, **asked).json()

    assert body["suggestion"]["changes"] == {"gpu_count": 2, "sharing": "auto"}
    assert post(operator_api, **{**asked, **body["suggestion"]["changes"]}).status_code == 201


def test_no_suggestion_rather_than_one_that_cannot_work(operator_api, cluster):
    # 1000 GB needs 13 GPUs of the largest size; no node has that many.
    response = post(operator_api, memory_gb=1000)

    assert response.status_code == 409
    body = response.json()
    assert body["suggestion"] is None
    assert body["detail"].startswith(f"No GPU of this cluster can hold 1000 GB: the largest has {_largest_gpu()}. "
                                     "0/12 nodes are available: 12 nodes have insufficient GPU memory")


def test_the_failing_replica_is_named_its_predecessors_released_and_fewer_replicas_work(operator_api, cluster):
    before = capacity_state()

    response = post(operator_api, memory_gb=70, replicas=32)

    assert response.status_code == 409
    body = response.json()
    failed = body["replica"]
    assert failed >= 1  # some replicas fitted first, in the decision only
    assert body["released_replicas"] == failed
    assert body["detail"].startswith(
        f"Replica {failed + 1} of 32 could not be placed; the {failed} earlier replicas' tentative "
        f"reservations were released. The cluster has room for {failed} replicas of this size now: "
    )
    assert body["reason"] == HELD_BY_REQUEST
    # The tentative reservations are gone: nothing stored, every GPU as it was.
    assert not Deployment.objects.exists() and not Placement.objects.exists() and not Decision.objects.exists()
    assert capacity_state() == before
    # The exclusive H100 nodes are not blamed for being full: only this request filled them.
    rows = {row["node"]: row for row in body["decision"]["rows"]}
    for node in ("h100-node-1", "h100-node-2"):
        assert rows[node]["reason"] == HELD_BY_REQUEST
    # The A100s are too small for 70 GB in any mode, and the rows say so in GB.
    assert rows["a100-node-1"]["reason"] == HARDWARE_MEMORY
    assert rows["a100-node-1"]["detail"] == "its largest GPU has 40 GB; the replica needs 70 GB on one GPU"
    assert body["suggestion"]["changes"] == {"replicas": failed}

    followed = post(operator_api, memory_gb=70, **body["suggestion"]["changes"])

    assert followed.status_code == 201, followed.json()
    assert len(followed.json()["placements"]) == failed


def test_one_earlier_replica_is_said_in_the_singular(operator_api, cluster):
    room = post(operator_api, memory_gb=70, replicas=32).json()["replica"]  # replicas of 70 GB that fit
    # Take all but one of them, so that a request of 3 places one and fails on the second.
    assert post(operator_api, name="first", memory_gb=70, replicas=room - 1).status_code == 201

    body = post(operator_api, memory_gb=70, replicas=3).json()

    assert body["replica"] == 1
    assert body["detail"].startswith("Replica 2 of 3 could not be placed; the earlier replica's tentative "
                                     "reservation was released. The cluster has room for 1 replica of this size now: "
                                     "1 node has capacity held only by this request's earlier replicas")
    assert body["suggestion"]["text"] == "ask for 1 replica"


def test_the_lead_is_the_reason_that_has_to_change_not_the_nodes_that_never_could(operator_api, cluster):
    # 75 GB on each of 8 GPUs: the A100s could never; the H100s could, but lack free GPUs.
    body = post(operator_api, memory_gb=600, gpu_count=8).json()

    assert body["reason"] != HARDWARE_MEMORY
    assert body["decision"]["diagnosis"]["rejected"][HARDWARE_MEMORY] == 8
    assert not body["detail"].startswith("8 nodes have insufficient GPU memory")
