"""`/api/v1/rollouts/`: roles, 201 / 400 / 409, the dry-run preview, list and read."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from nodes.contract import ANNOTATION_DO_NOT_DISRUPT
from nodes.models import GPU, Partition
from rollouts.models import RollingUpdate, RolloutNode
from tests.rollouts.cluster import nodes, replica

pytestmark = pytest.mark.django_db

URL = "/api/v1/rollouts/"
TIMESLICE_4 = {"mode": "timeslice", "replicas": 4}


def body(**overrides):
    return {"name": "ts4", "nodes": ["gpu-a", "gpu-b"], "config": TIMESLICE_4, "max_unavailable": 1, **overrides}


@pytest.fixture
def cluster():
    """gpu-a (1 GPU busy), gpu-b (empty), gpu-c (outside the rollout, 2 free GPUs): all exclusive H100 x2."""
    a, b, c = nodes("gpu-a", "gpu-b", "gpu-c")
    replica(a, "chat")
    return a, b, c


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# ---- access --------------------------------------------------------------------------------------


def test_anonymous_gets_401(api, cluster):
    assert api.post(URL, body(), format="json").status_code == 401
    assert api.get(URL).status_code == 401


def test_viewers_may_read_but_not_create_or_preview(viewer_api, operator_api, cluster):
    created = operator_api.post(URL, body(), format="json")
    assert created.status_code == 201, created.content

    assert viewer_api.post(URL, body(name="other"), format="json").status_code == 403
    assert viewer_api.post(URL + "preview/", body(), format="json").status_code == 403
    assert viewer_api.get(URL).status_code == 200
    assert viewer_api.get(f"{URL}{created.json()['id']}/").status_code == 200
    assert RollingUpdate.objects.count() == 1


def test_admins_may_create(admin_user, cluster):
    assert client_for(admin_user).post(URL, body(), format="json").status_code == 201


def test_a_user_without_a_role_gets_403(api, outsider, cluster):
    api.force_authenticate(outsider)
    assert api.post(URL, body(), format="json").status_code == 403
    assert api.get(URL).status_code == 403


# ---- create --------------------------------------------------------------------------------------


def test_it_answers_201_with_a_pending_rollout_and_its_nodes_in_batches(operator_api, operator, cluster):
    response = operator_api.post(URL, body(), format="json")

    assert response.status_code == 201, response.content
    data = response.json()
    assert data["status"] == "pending" and data["progress_percent"] == 0.0
    assert data["config"] == {"mode": "timeslice", "replicas": 4, "mig_layout": None}
    assert data["created_by"] == operator.username
    # The empty node goes first: it proves the new config before anything has to move.
    assert [(n["node"], n["state"], n["batch_index"]) for n in data["nodes"]] == [
        ("gpu-b", "pending", 1), ("gpu-a", "pending", 2),
    ]
    rollout = RollingUpdate.objects.get(pk=data["id"])
    assert [m["workload"] for b in rollout.plan["batches"] for m in b["moves"]] == ["default/chat"]
    assert RolloutNode.objects.get(rollout=rollout, node_name="gpu-a").previous_config == {
        "mode": "exclusive", "replicas": None, "mig_layout": None,
    }
    event = AuditEvent.objects.get(verb="rollingupdate.created")
    assert event.object_id == str(rollout.pk) and event.actor == operator.username
    assert event.after["nodes"] == ["gpu-a", "gpu-b"]


def test_nodes_at_the_target_or_holding_do_not_disrupt_workloads_are_skipped_with_a_reason(operator_api, cluster):
    _, b, _ = cluster
    at_target, pinned = nodes("gpu-d", "gpu-e", sharing_mode="timeslice", sharing_replicas=4)[0], nodes("gpu-e2")[0]
    replica(pinned, "train", labels={ANNOTATION_DO_NOT_DISRUPT: "true"})

    response = operator_api.post(URL, body(nodes=["gpu-b", "gpu-d", "gpu-e2"]), format="json")

    assert response.status_code == 201, response.content
    states = {n["node"]: (n["state"], n["reason"]) for n in response.json()["nodes"]}
    assert states["gpu-b"] == ("pending", "")
    assert states["gpu-d"] == ("skipped", "already at the target config")
    assert states["gpu-e2"][0] == "skipped" and "default/train" in states["gpu-e2"][1]
    assert at_target.name == "gpu-d"
    # Skipped nodes count as done.
    assert response.json()["progress_percent"] == pytest.approx(66.7)


# ---- 400 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "field"), [
    ({"nodes": ["gpu-a", "nope"]}, "nodes"),
    ({"nodes": ["gpu-a", "gpu-a"]}, "nodes"),
    ({"nodes": []}, "nodes"),
    ({"nodes": "gpu-a"}, "nodes"),
    ({"name": "Not A Label"}, "name"),
    ({"strategy": "yolo"}, "strategy"),
    ({"max_unavailable": 0}, "max_unavailable"),
    ({"max_unavailable": 1.0}, "max_unavailable"),
    ({"on_failure": "ignore"}, "on_failure"),
    ({"config": {"mode": "shared"}}, "config"),
    ({"config": "timeslice"}, "config"),
    ({"replicas": 4}, "replicas"),
])
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(operator_api, cluster, overrides, field):
    response = operator_api.post(URL, body(**overrides), format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert RollingUpdate.objects.count() == 0


@pytest.mark.parametrize(("config", "field", "words"), [
    # NVIDIA's MPS client limit for compute capability 9.0.
    ({"mode": "mps", "replicas": 100}, "replicas", "at most 48 clients"),
    ({"mode": "timeslice", "replicas": None}, "replicas", "needs replicas"),
    ({"mode": "exclusive", "replicas": 2}, "replicas", "must be null"),
    # The MIG planner's geometry: one 7g.80gb fills an H100.
    ({"mode": "mig", "mig_layout": {"7g.80gb": 2}}, "mig_layout", "at most 1x 7g.80gb fit on H100-SXM5-80GB"),
    ({"mode": "mig", "mig_layout": {"9g.99gb": 1}}, "mig_layout", "9g.99gb"),
])
def test_an_invalid_config_is_a_400_with_the_reason_for_the_gpu_model(operator_api, cluster, config, field, words):
    response = operator_api.post(URL, body(config=config), format="json")

    assert response.status_code == 400, response.content
    messages = response.json()["config"][field]
    assert len(messages) == 1 and words in messages[0]
    assert messages[0].startswith("H100-SXM5-80GB (gpu-a, gpu-b): ")
    assert RollingUpdate.objects.count() == 0


def test_a_mig_config_is_checked_for_each_gpu_model_named(operator_api, cluster):
    nodes("l4-a", gpu_model="L4")
    response = operator_api.post(URL, body(nodes=["gpu-b", "l4-a"], config={"mode": "mig", "mig_layout": {"3g.40gb": 2}}),
                                 format="json")

    assert response.status_code == 400
    assert response.json()["config"]["mig_layout"] == ["L4 (l4-a): NVIDIA L4 has no MIG: mode mig is not possible on this node"]


# ---- 409 ---------------------------------------------------------------------------------------


def test_409_when_the_rest_of_the_cluster_cannot_hold_the_workloads_and_nothing_is_stored(operator_api, cluster):
    _, b, c = cluster
    replica(b, "filler", gpus=2)
    replica(c, "big", gpus=2)  # one GPU free in the cluster (on gpu-a): neither replica has room to move to

    response = operator_api.post(URL, body(nodes=["gpu-a", "gpu-c"]), format="json")

    assert response.status_code == 409, response.content
    data = response.json()
    assert data["preview"]["feasible"] is False
    assert [reason.split(":")[0] for reason in data["reasons"]] == [
        "default/chat on gpu-a cannot move", "default/big on gpu-c cannot move",
    ]
    assert RollingUpdate.objects.count() == 0 and RolloutNode.objects.count() == 0
    assert not AuditEvent.objects.filter(verb="rollingupdate.created").exists()


def test_409_when_pods_gpuplane_did_not_place_leave_no_room(operator_api, cluster):
    _, b, c = cluster
    # Foreign pods fill gpu-b and gpu-c: inventory sync's counters and rows say so though no placement does.
    GPU.objects.filter(node__in=[b, c]).update(allocated_milli=1000)
    Partition.objects.filter(gpu__node__in=[b, c]).update(pod="other/hog")

    response = operator_api.post(URL, body(nodes=["gpu-a"]), format="json")

    assert response.status_code == 409
    [reason] = response.json()["reasons"]
    # The placement engine's answer, as a deploy would get it.
    assert reason.startswith("default/chat on gpu-a cannot move: 2 nodes have no free GPU or partition"), reason
    assert reason.endswith("0/3 nodes are available: 2 nodes have no free GPU or partition, 1 node is cordoned")


def test_409_when_a_node_is_in_another_active_rollout(operator_api, cluster):
    first = operator_api.post(URL, body(nodes=["gpu-b"]), format="json").json()

    response = operator_api.post(URL, body(name="again", nodes=["gpu-a", "gpu-b"]), format="json")

    assert response.status_code == 409
    assert f"gpu-b is already in active rollout {first['id']}" in response.json()["reasons"]
    assert RollingUpdate.objects.count() == 1


def test_409_when_no_node_needs_changing(operator_api, cluster):
    nodes("gpu-d", sharing_mode="timeslice", sharing_replicas=4)

    response = operator_api.post(URL, body(nodes=["gpu-d"]), format="json")

    assert response.status_code == 409
    assert response.json()["preview"]["skipped"] == [{"node": "gpu-d", "reason": "already at the target config"}]


# ---- preview -----------------------------------------------------------------------------------


def test_the_preview_shows_batches_moves_and_the_capacity_dip_and_stores_nothing(operator_api, cluster):
    response = operator_api.post(URL + "preview/", body(), format="json")

    assert response.status_code == 200, response.content
    data = response.json()
    assert data["feasible"] is True and data["blockers"] == []
    assert [b["nodes"] for b in data["batches"]] == [["gpu-b"], ["gpu-a"]]
    # gpu-b is changed by then (time-slicing x 4, empty): the engine packs the copy onto one of its replicas;
    # 2 of 6 GPUs out at a time.
    assert data["batches"][1]["moves"] == [
        {"workload": "default/chat", "size_milli": 1000, "source": "gpu-a", "destination": "gpu-b",
         "outcome": "placed", "gpus": [0], "partition": "timeslice 250 m", "reason": ""}
    ]
    assert data["batches"][0]["capacity_dip_milli"] == 2000 and data["batches"][0]["total_capacity_milli"] == 6000
    assert data["batches"][0]["capacity_dip_percent"] == pytest.approx(33.3)
    assert "placement engine" in data["placer"]
    assert ("  default/chat moves from gpu-a to gpu-b (timeslice 250 m on GPU 0) before gpu-a is drained"
            in data["explanation"])
    # (The role fixtures' own grants are recorded as account events: not the preview's.)
    assert RollingUpdate.objects.count() == 0 and not AuditEvent.objects.exclude(object_type="auth.user").exists()


def test_blue_green_changes_the_whole_pool_at_once_after_moving_everything_out(operator_api, cluster):
    response = operator_api.post(URL + "preview/", body(strategy="blue-green"), format="json")

    data = response.json()
    assert [b["nodes"] for b in data["batches"]] == [["gpu-b", "gpu-a"]]
    assert [m["destination"] for m in data["batches"][0]["moves"]] == ["gpu-c"]
    assert data["strategy"] == "blue-green" and data["max_unavailable"] == 1


def test_an_infeasible_preview_is_a_200_with_its_refusals(operator_api, cluster):
    _, b, c = cluster
    replica(b, "filler", gpus=2)
    replica(c, "big", gpus=2)

    response = operator_api.post(URL + "preview/", body(nodes=["gpu-a", "gpu-c"]), format="json")

    assert response.status_code == 200
    data = response.json()
    assert data["feasible"] is False and len(data["blockers"]) == 2
    assert [(r["workload"], r["node"]) for r in data["refusals"]] == [("default/chat", "gpu-a"), ("default/big", "gpu-c")]
    assert RollingUpdate.objects.count() == 0


def test_the_preview_refuses_bad_input_like_create(operator_api, cluster):
    response = operator_api.post(URL + "preview/", body(config={"mode": "mps", "replicas": 100}), format="json")
    assert response.status_code == 400 and "replicas" in response.json()["config"]


# ---- list and read -----------------------------------------------------------------------------


def test_list_is_paginated_newest_first_and_filters_by_status(operator_api, cluster):
    for name, node in (("one", "gpu-a"), ("two", "gpu-b")):
        assert operator_api.post(URL, body(name=name, nodes=[node]), format="json").status_code == 201

    data = operator_api.get(URL + "?limit=1").json()
    assert data["count"] == 2 and [r["name"] for r in data["results"]] == ["two"]
    assert operator_api.get(URL + "?status=running").json()["count"] == 0
    assert [r["name"] for r in operator_api.get(URL + "?name=one").json()["results"]] == ["one"]  # `gpuplane rollout status one`
    assert operator_api.get(URL + "?name=on").json()["count"] == 0  # exact, not a prefix
    assert operator_api.get(URL + "?status=bogus").status_code == 400
    assert operator_api.get(URL + "?colour=red").status_code == 400


def test_read_one(operator_api, cluster):
    created = operator_api.post(URL, body(), format="json").json()

    data = operator_api.get(f"{URL}{created['id']}/").json()
    assert data == created
    assert operator_api.get(f"{URL}999999/").status_code == 404


def test_targets_may_be_chosen_by_label_like_a_node_selector(operator_api, cluster):
    a, b, c = cluster
    for node, pool in ((a, "serving"), (b, "serving"), (c, "batch")):
        node.labels = {"pool": pool, "kubernetes.io/os": "linux"}
        node.save(update_fields=["labels"])

    data = {k: v for k, v in body(node_selector={"pool": "serving", "kubernetes.io/os": "linux"}).items() if k != "nodes"}
    response = operator_api.post(URL, data, format="json")

    assert response.status_code == 201, response.content
    assert sorted(n["node"] for n in response.json()["nodes"]) == ["gpu-a", "gpu-b"]


@pytest.mark.parametrize(("overrides", "field", "words"), [
    ({"node_selector": {"pool": "nowhere"}, "nodes": None}, "node_selector", "No node has all of these labels."),
    ({"node_selector": {"pool": "serving"}}, "nodes", "not both"),
    ({"nodes": None}, "nodes", "not neither"),
])
def test_a_selector_that_matches_nothing_or_comes_with_names_is_a_400(operator_api, cluster, overrides, field, words):
    data = {k: v for k, v in body(**overrides).items() if v is not None}

    response = operator_api.post(URL, data, format="json")

    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field])
    assert not RollingUpdate.objects.exists()
