"""Simulated Deployments: scale, delete, apply again."""

import pytest

from nodes.cluster.base import NotFound
from tests.nodes.cluster_sim.helpers import A100_80, pods_of, workload


def test_scale_and_delete(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.create_workload(workload(replicas=1))
    cluster.scale_workload("ml", "llm", 3)
    assert len(pods_of(cluster, "llm")) == 3
    assert len({p.name for p in pods_of(cluster, "llm")}) == 3
    clock.advance(2)
    assert cluster.workload_ready("ml", "llm")

    cluster.delete_workload("ml", "llm")
    assert pods_of(cluster, "llm") == []
    with pytest.raises(NotFound):
        cluster.workload_ready("ml", "llm")
    with pytest.raises(NotFound):
        cluster.scale_workload("ml", "llm", 1)
    with pytest.raises(NotFound):
        cluster.delete_workload("ml", "llm")


def test_creating_an_existing_workload_applies_it(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.create_workload(workload())
    [first] = pods_of(cluster, "llm")
    cluster.create_workload(workload())  # same spec: nothing to do
    assert [p.name for p in pods_of(cluster, "llm")] == [first.name]
    changed = workload()
    changed.image = "vllm/vllm-openai:v0.7"
    cluster.create_workload(changed)  # new template: pods replaced
    [second] = pods_of(cluster, "llm")
    assert second.name != first.name
    [deployment] = cluster.list_objects("Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.7"


def test_a_workload_with_no_replicas_is_ready(cluster):
    cluster.create_workload(workload(replicas=0))
    assert cluster.workload_ready("ml", "llm")
