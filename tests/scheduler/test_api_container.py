"""Per-deployment container: image, command, args and env on `POST /api/v1/deployments/` and the deploy
form, validated (400 naming the field), stored, and on the workload created on the cluster;
`GPUPLANE_WORKLOAD_IMAGE` stays the default."""
from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from scheduler.models import Deployment
from tests.scheduler.inventory import demo_cluster

pytestmark = pytest.mark.django_db

BODY = {"name": "chat", "model": "mistral-7b", "memory_gb": 8}
IMAGE = "registry.example.com:5000/serving/vllm-openai:v0.6.3"


@pytest.fixture
def cluster():
    return demo_cluster()


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def container_of(cluster: Any, deployment: Deployment) -> dict[str, Any]:
    [workload] = [d for d in cluster.list_objects("Deployment") if d["metadata"]["namespace"] == deployment.namespace
                  and d["metadata"]["labels"].get("gpuplane.io/deployment") == str(deployment.pk)]
    [main] = workload["spec"]["template"]["spec"]["containers"]
    return main


def test_the_workload_runs_the_requested_image_command_args_and_env(operator_api, cluster):
    body = {**BODY, "image": IMAGE, "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "args": ["--model", "mistralai/Mistral-7B-v0.3", "--max-model-len", "8192"],
            "env": {"HF_HOME": "/models", "VLLM_LOGGING_LEVEL": "debug"}}

    response = operator_api.post("/api/v1/deployments/", body, format="json")

    assert response.status_code == 201, response.content
    answer = response.json()
    assert (answer["image"], answer["command"], answer["args"], answer["env"]) == (
        body["image"], body["command"], body["args"], body["env"])
    main = container_of(cluster, Deployment.objects.get())
    assert main["image"] == IMAGE
    assert main["command"] == body["command"] and main["args"] == body["args"]
    env = {item["name"]: item["value"] for item in main["env"]}
    assert env["HF_HOME"] == "/models" and env["VLLM_LOGGING_LEVEL"] == "debug"
    assert env["MODEL_NAME"] == "mistral-7b"  # gpuplane's own still there


def test_without_them_the_default_image_and_the_images_entrypoint(operator_api, cluster, settings):
    settings.GPUPLANE_WORKLOAD_IMAGE = "vllm/vllm-openai:v0.6.0"

    assert operator_api.post("/api/v1/deployments/", BODY, format="json").status_code == 201

    main = container_of(cluster, Deployment.objects.get())
    assert main["image"] == "vllm/vllm-openai:v0.6.0"
    assert "command" not in main and "args" not in main
    # gpuplane's own only (the MPS limits where the placement is an MPS slot).
    assert {item["name"] for item in main["env"]} - {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"} == {
        "MODEL_NAME"}


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"image": "Not An Image"}, "image"),
        ({"image": "vllm/vllm-openai:latest\n"}, "image"),
        ({"image": "x" * 513}, "image"),
        ({"image": 7}, "image"),
        ({"command": "python3 -m vllm"}, "command"),  # a string, not a list
        ({"command": ["python3", 3]}, "command"),
        ({"args": ["--x", "a\x00b"]}, "args"),
        ({"args": ["-v"] * 65}, "args"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"HF HOME": "x"}}, "env"),
        ({"env": {"HF_HOME\n": "x"}}, "env"),
        ({"env": {"MODEL_NAME": "other"}}, "env"),  # gpuplane's
        ({"env": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}}, "env"),  # would lift the MPS share
        ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env"),  # would reach every GPU of the node
        ({"env": {"X": 1}}, "env"),
        ({"env": ["X=1"]}, "env"),
    ],
)
def test_a_bad_container_is_a_400_naming_the_field_and_stores_nothing(operator_api, cluster, overrides, field):
    response = operator_api.post("/api/v1/deployments/", {**BODY, **overrides}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Deployment.objects.exists()
    assert not cluster.list_objects("Deployment")


def test_a_form_encoded_post_takes_lines(operator_api, cluster):
    response = operator_api.post("/api/v1/deployments/", {
        **BODY, "image": IMAGE, "command": "python3\n-m\nvllm.entrypoints.openai.api_server\n",
        "args": "--model\nmistralai/Mistral-7B-v0.3", "env": "HF_HOME=/models\nTOKEN=a=b",
    })

    assert response.status_code == 201, response.content
    stored = Deployment.objects.get()
    assert stored.command == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert stored.args == ["--model", "mistralai/Mistral-7B-v0.3"]
    assert stored.env == {"HF_HOME": "/models", "TOKEN": "a=b"}


def test_the_deploy_form_takes_them_and_names_a_bad_one(client, operator, cluster):
    client.force_login(operator)
    form = {**BODY, "gpu_count": 1, "replicas": 1, "workload_type": "inference", "priority": "medium",
            "namespace": "default", "sharing": "auto", "enable_gpu_selection": "on"}

    refused = client.post("/deployments/new/", {**form, "env": "MODEL_NAME=x"})
    assert refused.status_code == 200 and "MODEL_NAME is set by gpuplane" in refused.content.decode()
    assert not Deployment.objects.exists()

    client.post("/deployments/new/", {**form, "image": IMAGE, "args": "--max-model-len\n8192", "env": "HF_HOME=/m"})
    stored = Deployment.objects.get()
    assert (stored.image, stored.args, stored.env) == (IMAGE, ["--max-model-len", "8192"], {"HF_HOME": "/m"})
    assert container_of(cluster, stored)["image"] == IMAGE
    page = client.get(f"/deployments/{stored.pk}/").content.decode()
    assert IMAGE in page and "HF_HOME=/m" in page and "--max-model-len 8192" in page
