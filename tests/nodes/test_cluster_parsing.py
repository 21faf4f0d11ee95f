"""The one parser both backends use: Kubernetes JSON -> ClusterNode / ClusterPod."""
from decimal import Decimal

import pytest

from nodes.cluster.base import ClusterError, WorkloadSpec
from nodes.cluster.manifests import deployment_manifest, pinned_node
from nodes.cluster.parsing import parse_node, parse_pod, parse_quantity


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("64", Decimal(64)),
        ("63500m", Decimal("63.5")),  # 63500 / 1000
        ("1Ki", Decimal(1024)),
        ("512Gi", Decimal(512 * 2**30)),
        ("1e3", Decimal(1000)),
        ("2M", Decimal(2_000_000)),
        (8, Decimal(8)),
    ],
)
def test_it_parses_kubernetes_quantities(raw, expected):
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize("raw", ["", "12Qi", "abc", "1.2.3"])
def test_it_rejects_malformed_quantities(raw):
    with pytest.raises(ClusterError, match="invalid Kubernetes quantity"):
        parse_quantity(raw)


def _node(**overrides):
    obj = {
        "metadata": {
            "name": "gpu-node-1",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.count": "4",
                "nvidia.com/gpu.memory": "40960",
            },
            "annotations": {
                "gpuplane.io/gpu-uuids": "GPU-a,GPU-b,GPU-c,GPU-d",
                "gpuplane.io/mig-layout": '{"2": [["3g.20gb", 0, 4, "MIG-1"], ["2g.10gb", 4, 2, "MIG-2"]]}',
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "unschedulable": True},
        "status": {
            "allocatable": {"cpu": "95500m", "memory": "1031000Mi", "nvidia.com/gpu": "3", "nvidia.com/mig-3g.20gb": "1", "pods": "110"},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
        },
    }
    obj.update(overrides)
    return obj


def test_it_reads_gpus_from_gfd_labels_and_agent_annotations():
    node = parse_node(_node())
    assert [g.uuid for g in node.gpus] == ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
    assert {g.memory_mib for g in node.gpus} == {40960}
    assert [g.mig_enabled for g in node.gpus] == [False, False, True, False]
    assert [(d.profile, d.start, d.size) for d in node.gpus[2].mig_devices] == [("3g.20gb", 0, 4), ("2g.10gb", 4, 2)]
    assert node.cpu_allocatable_milli == 95500
    assert node.memory_allocatable_mib == 1031000
    # Only extended resources are kept (they carry a "/"): "pods" is not one.
    assert node.allocatable == {"nvidia.com/gpu": 3, "nvidia.com/mig-3g.20gb": 1}
    assert node.ready and node.unschedulable
    assert node.taints[0].key == "nvidia.com/gpu" and node.taints[0].value == ""


def test_it_derives_stable_uuids_when_the_agent_has_not_reported():
    obj = _node()
    del obj["metadata"]["annotations"]
    node = parse_node(obj)
    assert [g.uuid for g in node.gpus] == [f"GPU-gpu-node-1-{i}" for i in range(4)]
    assert not any(g.mig_enabled for g in node.gpus)


def test_a_node_without_ready_condition_is_not_ready_and_cpu_nodes_have_no_gpus():
    node = parse_node({"metadata": {"name": "cpu-1"}, "status": {"allocatable": {"cpu": "8"}}})
    assert not node.ready and node.gpus == () and node.cpu_allocatable_milli == 8000


def test_a_malformed_mig_annotation_is_a_clear_cluster_error():
    obj = _node()
    obj["metadata"]["annotations"]["gpuplane.io/mig-layout"] = "{not json"
    with pytest.raises(ClusterError, match="gpu-node-1: annotation gpuplane.io/mig-layout is malformed"):
        parse_node(obj)


def test_pod_gpu_requests_sum_containers_and_ignore_cpu_only_pods():
    pod = {
        "metadata": {"name": "p", "namespace": "serving", "ownerReferences": [{"kind": "ReplicaSet", "name": "rs"}]},
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}},
                {"resources": {"requests": {"nvidia.com/gpu": "1"}}},
                {"resources": {"limits": {"nvidia.com/mig-3g.20gb": "1"}}},
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    parsed = parse_pod(pod)
    assert parsed is not None
    assert parsed.gpu_requests == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}
    assert parsed.key == "serving/p" and parsed.ready and parsed.owner_kind == "ReplicaSet"
    # An unbound pod without GPUs holds nothing yet.
    assert parse_pod({"metadata": {"name": "cpu"}, "spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}}) is None


def test_a_pods_cpu_and_memory_requests_are_counted_as_node_resources_fit_counts_them():
    pod = {
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}},
                {"resources": {"limits": {"cpu": "1", "memory": "512Mi"}}},  # limits only: the request too
                {"resources": {}},
            ],
            # An init container that asks more than the containers together sets the pod's figure.
            "initContainers": [{"resources": {"requests": {"cpu": "3"}}}, {"resources": {"requests": {"memory": "1Gi"}}}],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        },
        "status": {"phase": "Running"},
    }
    parsed = parse_pod(pod)
    assert parsed is not None and parsed.gpu_requests == {}
    # CPU: max(500m + 1, 3) + 250m = 3250m. Memory: max(1Gi + 512Mi, 1Gi) + 120Mi = 1656 MiB.
    assert (parsed.cpu_request_milli, parsed.memory_request_mib) == (3250, 1656)
    # A pod that asks for nothing at all takes nothing of its node.
    assert parse_pod({"metadata": {"name": "idle"}, "spec": {"nodeName": "n", "containers": [{}]}}) is None


def test_deployment_manifest_pins_with_required_hostname_affinity():
    spec = WorkloadSpec(
        namespace="serving",
        name="llama-0",
        node_name="h100-node-1",
        image="vllm/vllm-openai:v0.6.0",
        resources={"nvidia.com/gpu": 1},
        env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"},
        labels={"gpuplane.io/deployment": "7"},
        priority_class_name="gpuplane-high",
    )
    manifest = deployment_manifest(spec)
    pod_spec = manifest["spec"]["template"]["spec"]
    assert pinned_node(manifest) == "h100-node-1"
    assert pod_spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert pod_spec["containers"][0]["env"] == [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "50"}]
    assert pod_spec["priorityClassName"] == "gpuplane-high"
    assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuplane"
    # The selector must match the pod template's labels or the API server rejects the Deployment.
    selector = manifest["spec"]["selector"]["matchLabels"]
    assert selector.items() <= manifest["spec"]["template"]["metadata"]["labels"].items()


def test_the_manifest_requests_and_limits_cpu_and_memory():
    spec = WorkloadSpec(namespace="serving", name="llama-0", node_name="n", image="vllm", resources={"nvidia.com/gpu": 1},
                        host_requests={"cpu": "8", "memory": "64Gi"})
    resources = deployment_manifest(spec)["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "8", "memory": "64Gi"},
                         "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}}


def test_an_unpinned_manifest_leaves_the_choice_to_the_default_scheduler():
    spec = WorkloadSpec(namespace="default", name="x", node_name=None, image="busybox")
    manifest = deployment_manifest(spec)
    assert pinned_node(manifest) is None
    assert "affinity" not in manifest["spec"]["template"]["spec"]
