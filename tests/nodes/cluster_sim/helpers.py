"""GPU products, workload specs and read-back shortcuts shared by the simulated cluster tests.

Everything is read back through the ClusterBackend (list_nodes / list_gpu_pods), i.e. through the
same parser a real cluster's JSON goes through.
"""
from nodes.cluster.base import WorkloadSpec

A100_80 = {"product": "NVIDIA-A100-SXM4-80GB", "gpu_memory_mib": 81920}
H100 = {"product": "NVIDIA-H100-80GB-HBM3", "gpu_memory_mib": 81559}


def node(cluster, name):
    return next(n for n in cluster.list_nodes() if n.name == name)


def pods_of(cluster, workload):
    return [p for p in cluster.list_gpu_pods() if p.labels.get("app.kubernetes.io/name") == workload]


def raw_pod(cluster, name):
    return next(p for p in cluster.list_objects("Pod") if p["metadata"]["name"] == name)


def workload(name="llm", node_name="gpu-1", replicas=1, **resources):
    return WorkloadSpec(
        namespace="ml",
        name=name,
        node_name=node_name,
        image="vllm/vllm-openai:v0.6",
        replicas=replicas,
        resources=resources or {"nvidia.com/gpu": 1},
    )


def gpu(count):
    return {"nvidia.com/gpu": count}
