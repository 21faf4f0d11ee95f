"""What the deployment page tests start from: form data for the seed's scenario 2, a signed-in
client, deploys through the real services, and the count of free partitions.
"""
from __future__ import annotations

from typing import Any

from django.test import Client

from nodes.models import Partition
from scheduler import services
from scheduler.models import Deployment

LOW_BATCH = {  # the seed's scenario 2: lands on an A100 at 50 % MPS
    "name": "embedder", "model": "bge-large", "memory_gb": "8", "gpu_count": "1", "replicas": "1",
    "workload_type": "batch", "priority": "low", "latency_slo_ms": "", "namespace": "search",
    "labels": "team=search\ntier=canary", "sharing": "auto", "enable_gpu_selection": "on",
}


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def deploy(**fields: Any) -> Deployment:
    """A deployment through the real services (validation, decision, reservation, simulated cluster)."""
    return services.deploy(services.DeploySpec(**{"model": "llama-3-8b", "memory_gb": 8, **fields}))


def free_partitions() -> int:
    return Partition.objects.filter(hold__isnull=True, pod="").count()
