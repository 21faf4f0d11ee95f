"""GPU products, workload specs and read-back shortcuts shared by the simulated cluster tests.

Everything is read back through the ClusterBackend (list_nodes / list_gpu_pods), i.e. through the
same parser a real cluster's JSON goes through.
"""
import json
import sqlite3

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


def stored(state_path, collection, key):
    """The object as the state file holds it (None when deleted or never written), read with sqlite3 itself."""
    with sqlite3.connect(state_path) as connection:
        row = connection.execute("SELECT body FROM objects WHERE coll = ? AND key = ?", (collection, key)).fetchone()
    return json.loads(row[0]) if row and row[0] is not None else None


def row_versions(state_path):
    """{(collection, key): version} of every row of the state file."""
    with sqlite3.connect(state_path) as connection:
        return {(coll, key): version for coll, key, version in connection.execute("SELECT coll, key, version FROM objects")}
