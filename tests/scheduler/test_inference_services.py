"""OME InferenceServices (must-show 5, second half): what gpuplane renders validates against OME's own
CRD schema (shared/data/ome), with the required node affinity and without it (GPU selection off);
the GPU count follows the tensor-parallel size; the webhook and the dry run handle them."""
from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from rest_framework.test import APIClient

from scheduler import services
from scheduler.inference_services import engine_pod, tp_size
from scheduler.services import DeploySpec
from scheduler.services.rendering import inference_services
from tests.scheduler.inventory import demo_cluster

pytestmark = pytest.mark.django_db

CRD = Path(__file__).resolve().parents[3] / "shared" / "data" / "ome" / "ome.io_inferenceservices.yaml"
if not CRD.exists():  # a worktree beside /work/shared
    CRD = Path("/work/shared/data/ome/ome.io_inferenceservices.yaml")


def strict(schema):
    """The CRD's schema as the API server applies it, made strict: an unknown field (which the API
    server would prune silently) fails, so a misspelt one cannot pass."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


@pytest.fixture(scope="module")
def schema():
    """A validator of OME's v1beta1 schema, built once (the CRD is 1.5 MB of YAML)."""
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return jsonschema.Draft7Validator(strict(version["schema"]["openAPIV3Schema"]))


@pytest.fixture
def cluster():
    return demo_cluster()


def render(cluster, **fields):
    values = {"name": "qwen", "model": "Qwen/Qwen1.5-32B-Chat", "memory_gb": 60, "namespace": "ml",
              "args": ["--tp-size", "2"], "allow_default_scheduler": False, **fields}
    deployment = services.deploy(DeploySpec(**values), cluster=cluster)
    return deployment, inference_services(deployment)


def test_it_validates_against_omes_crd_with_the_required_node_affinity(cluster, schema):
    deployment, (manifest,) = render(cluster)
    schema.validate(manifest)
    engine = manifest["spec"]["engine"]
    terms = engine["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    node = deployment.placements.get().node.name
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]
    # --tp-size 2 -> two GPUs, without the request saying gpu_count
    assert deployment.gpu_count == 2 and engine["runner"]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert manifest["spec"]["model"] == {"name": "qwen-qwen1-5-32b-chat"}


def test_it_validates_without_affinity_when_gpu_selection_is_off(cluster, schema):
    _, (manifest,) = render(cluster, enable_gpu_selection=False)
    schema.validate(manifest)
    assert "affinity" not in manifest["spec"]["engine"]


def test_the_schema_check_would_catch_a_mistake(cluster, schema):
    _, (manifest,) = render(cluster)
    manifest["spec"]["engine"]["minReplica"] = 1  # misspelt
    with pytest.raises(jsonschema.ValidationError):
        schema.validate(manifest)


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--tp-size", "4"], [], 4), (["--tp_size=8"], [], 8), (["--tpsize", "2"], [], 2),
    (["python", "-m", "sglang.launch_server", "--tp-size=2"], [], 2),
    ([], [{"name": "TP_SIZE", "value": "4"}], 4), (["--tp-size"], [], None), ([], [], None),
])
def test_the_gpu_count_comes_from_any_spelling_of_tp_size(args, env, expected):
    assert tp_size(args, env) == expected


def test_a_tp_size_that_disagrees_with_the_gpu_count_is_a_400(operator):
    client = APIClient()
    client.force_authenticate(operator)
    response = client.post("/api/v1/deployments/", {"name": "x", "model": "m", "memory_gb": 8, "gpu_count": 4,
                                                    "args": ["--tp-size", "2"]}, format="json")
    assert response.status_code == 400 and "gpu_count" in response.json()


def test_the_api_renders_them_and_the_dry_run_takes_one(cluster, operator, schema):
    deployment, _ = render(cluster)
    client = APIClient()
    client.force_authenticate(operator)
    rendered = client.get(f"/api/v1/deployments/{deployment.pk}/inference-services/")
    assert rendered.status_code == 200
    schema.validate(rendered.json()[0])

    sample = yaml.safe_load((CRD.parent / "sample-isvc-qwen1.5-32b-chat.yaml").read_text())
    sample["spec"]["engine"]["runner"] = {"name": "engine", "image": "sglang", "args": ["--tp-size", "2"]}
    assert engine_pod(sample)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    answer = client.post("/api/v1/admission/dry-run/", {"object": sample}, format="json")
    assert answer.status_code == 200
    body = answer.json()
    assert body["result"] == "placed" and body["deployment"] is None and body["patch"]
