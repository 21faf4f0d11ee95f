"""scheduler.services: request validation, per field, storing nothing (on the demo cluster)."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduler import services
from scheduler.models import Deployment
from tests.scheduler.services.specs import spec

pytestmark = pytest.mark.django_db


# ---- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "field"), [
    ({"name": "Not_A_Label"}, "name"),
    ({"name": "x" * 64}, "name"),
    ({"name": "bad\x00name"}, "name"),
    ({"namespace": "-dash"}, "namespace"),
    ({"model": ""}, "model"),
    ({"model": "m\x00"}, "model"),
    ({"memory_gb": 0}, "memory_gb"),
    ({"memory_gb": -1.5}, "memory_gb"),
    ({"memory_gb": float("nan")}, "memory_gb"),
    ({"memory_gb": float("inf")}, "memory_gb"),
    ({"memory_gb": "8"}, "memory_gb"),
    ({"gpu_count": 0}, "gpu_count"),
    ({"gpu_count": 17}, "gpu_count"),
    ({"replicas": 0}, "replicas"),
    ({"replicas": 10_000}, "replicas"),
    ({"latency_slo_ms": 0}, "latency_slo_ms"),
    ({"workload_type": "mining"}, "workload_type"),
    ({"priority": "urgent"}, "priority"),
    ({"sharing": "half"}, "sharing"),
    ({"sharing": "timeslice", "gpu_count": 2}, "sharing"),
    ({"sharing": "mps", "gpu_count": 4}, "sharing"),
    ({"labels": ["a"]}, "labels"),
    ({"labels": {"team": 1}}, "labels"),
    ({"labels": {"bad key!": "x"}}, "labels"),
    ({"labels": {"team": "a b"}}, "labels"),
    ({"labels": {"gpuplane.io/deployment": "7"}}, "labels"),
    ({"labels": {"app.kubernetes.io/managed-by": "me"}}, "labels"),
])
def test_invalid_requests_are_refused_per_field_and_store_nothing(cluster, overrides, field):
    with pytest.raises(ValidationError) as raised:
        services.deploy(spec(**overrides), cluster=cluster)

    assert field in raised.value.message_dict
    assert not Deployment.objects.exists()


def test_valid_labels_and_an_8_gpu_gang_pass_validation():
    checked = services.validate_spec(spec(gpu_count=8, labels={"team": "search", "example.com/tier": "canary-1",
                                                               "empty": ""}))
    assert checked.labels["example.com/tier"] == "canary-1"
    assert checked.memory_gb == 8.0
    assert spec(memory_gb=7.99).memory_mib == 8182  # rounded up, never down


def test_placement_summary_reads_like_the_contract(cluster):
    deployment = services.deploy(spec(name="weighted", memory_gb=2, sharing="mps-weighted"), cluster=cluster)

    summary = services.placement_summary(deployment.placements.get())

    assert summary == {"node": "a100-node-4", "gpu_model": "A100-SXM4-40GB", "gpus": [0], "sharing": "mps-weighted",
                       "share_percent": 25.0, "memory_gb": 2.0, "mig_profile": ""}
