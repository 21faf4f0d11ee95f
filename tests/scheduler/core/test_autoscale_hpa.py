"""Native HPA mode (issue 22, must-show 4): the rendered autoscaling/v2 HPA validates against
Kubernetes' schema and carries the policy's behavior."""
from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from scheduler.core.autoscale import AutoscaleSettings
from scheduler.core.autoscale_hpa import (
    ARRIVAL_METRIC,
    QUEUE_METRIC,
    average_value,
    hpa_manifest,
    limitations,
    stabilization_windows,
)

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")  # as tests/deploy/test_manifests.py


def render(policy: str, **overrides) -> dict:
    return hpa_manifest(name="chat-hpa", namespace="inference", deployment_id="42", target_name="chat-0",
                        policy=policy, settings=AutoscaleSettings.from_dict(overrides or None),
                        capacity_rps_per_replica=0.93, cold_start_s=45.0)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("policy", ["seed", "hpa", "gpuplane"])
def test_the_hpa_validates_strictly(policy, version):
    kubernetes_validate.validate(render(policy), version, strict=True)


def test_the_validation_would_catch_a_mistake():
    manifest = copy.deepcopy(render("hpa"))
    manifest["spec"]["behavior"]["scaleUp"]["stabilizationWindow"] = 0  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, KUBERNETES_VERSIONS[0], strict=True)


def test_behavior_matches_each_policy():
    assert stabilization_windows(render("seed")) == (60, 300)
    assert stabilization_windows(render("hpa")) == (0, 300)
    assert stabilization_windows(render("gpuplane")) == (10, 300)
    seed = render("seed")["spec"]
    assert seed["behavior"]["scaleUp"]["policies"] == [{"type": "Pods", "value": 4, "periodSeconds": 60}]
    assert seed["behavior"]["scaleDown"]["policies"] == [{"type": "Pods", "value": 2, "periodSeconds": 300}]
    assert average_value(seed["metrics"][0]["external"]["target"]["averageValue"]) == 5.0
    overridden = render("seed", seed_up_window_s=120, min_replicas=2, max_replicas=9)
    assert stabilization_windows(overridden)[0] == 120
    assert (overridden["spec"]["minReplicas"], overridden["spec"]["maxReplicas"]) == (2, 9)


def test_external_metrics_select_the_deployment():
    spec = render("gpuplane")["spec"]
    names = [m["external"]["metric"]["name"] for m in spec["metrics"]]
    assert names == [ARRIVAL_METRIC, QUEUE_METRIC]
    for metric in spec["metrics"]:
        assert metric["external"]["metric"]["selector"] == {"matchLabels": {"gpuplane.io/deployment": "42"}}
    # arrivals per replica: the predicted capacity less the cold-start headroom
    assert 0 < average_value(spec["metrics"][0]["external"]["target"]["averageValue"]) < 0.93


def test_what_kubernetes_cannot_express_is_said():
    assert any("efficiency" in note for note in limitations("seed"))
    with pytest.raises(ValueError):
        render("static")
