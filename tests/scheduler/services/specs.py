"""Deploy requests for the service tests, and reading back the workload a deploy created."""
from __future__ import annotations

from scheduler.services import DeploySpec


def spec(**overrides) -> DeploySpec:
    values = {"name": "chat", "model": "llama-3-8b", "memory_gb": 8.0}
    values.update(overrides)
    return DeploySpec(**values)


def workload(cluster, name):
    return next(d for d in cluster.list_objects("Deployment") if d["metadata"]["name"] == name)
