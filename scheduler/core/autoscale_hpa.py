"""Native HPA mode: a deployment's policy as an ``autoscaling/v2`` HorizontalPodAutoscaler.

Pure Python. For teams who prefer Kubernetes' own autoscaler, gpuplane writes an HPA with the
behavior of the deployment's policy (stabilization windows and rate policies) and External
metrics that a Prometheus adapter serves from the serving engine's metrics, selected by the
deployment's label. What Kubernetes cannot express is said in ``limitations``: the HPA then
decides *whether* and kube-scheduler *where* (gpuplane's placement engine does not place the
replicas it adds), and the seed's efficiency and cost conditions have no HPA form.

External metric names (served by prometheus-adapter rules, docs/operations.md):
``gpuplane_queue`` (requests waiting, ``sum(vllm:num_requests_waiting)`` per deployment) and
``gpuplane_arrival_rps`` (requests per second arriving). Both carry the label
``gpuplane.io/deployment``.
"""
from __future__ import annotations

from typing import Any

from nodes.contract import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE
from scheduler.core.autoscale import AutoscaleSettings, cold_start_headroom

QUEUE_METRIC = "gpuplane_queue"
ARRIVAL_METRIC = "gpuplane_arrival_rps"


def _external(name: str, deployment_id: str, average: float) -> dict[str, Any]:
    # Quantities as milli-units strings ("4500m") keep fractional targets exact.
    return {
        "type": "External",
        "external": {
            "metric": {"name": name, "selector": {"matchLabels": {LABEL_DEPLOYMENT: deployment_id}}},
            "target": {"type": "AverageValue", "averageValue": f"{max(1, round(average * 1000))}m"},
        },
    }


def _rule(window_s: float, policies: list[dict[str, Any]]) -> dict[str, Any]:
    return {"stabilizationWindowSeconds": int(round(window_s)), "selectPolicy": "Max", "policies": policies}


def hpa_manifest(*, name: str, namespace: str, deployment_id: str, target_name: str, policy: str,
                 settings: AutoscaleSettings, capacity_rps_per_replica: float | None = None,
                 cold_start_s: float | None = None, target_kind: str = "Deployment") -> dict[str, Any]:
    """The HPA for one deployment's workload ``target_name`` under ``policy`` (seed, hpa, gpuplane)."""
    s = settings
    if policy == "seed":
        metrics = [_external(QUEUE_METRIC, deployment_id, s.seed_queue_up)]
        up = _rule(s.seed_up_window_s, [{"type": "Pods", "value": s.seed_up_step,
                                         "periodSeconds": int(max(s.seed_up_window_s, 1))}])
        down = _rule(s.seed_down_window_s, [{"type": "Pods", "value": s.seed_down_step,
                                             "periodSeconds": int(max(s.seed_down_window_s, 1))}])
    elif policy == "gpuplane":
        capacity = capacity_rps_per_replica or 1.0
        headroom = cold_start_headroom(cold_start_s if cold_start_s is not None else s.default_cold_start_s, s)
        # Target arrivals per replica = capacity less the cold-start headroom; the queue metric
        # adds replicas when a backlog forms all the same.
        per_replica_queue = max(1.0, capacity * s.ttft_slo_s * s.queue_budget_fraction)
        metrics = [_external(ARRIVAL_METRIC, deployment_id, capacity / (1 + headroom)),
                   _external(QUEUE_METRIC, deployment_id, per_replica_queue)]
        up = _rule(s.up_window_s, [{"type": "Percent", "value": 100, "periodSeconds": 15},
                                   {"type": "Pods", "value": 4, "periodSeconds": 15}])
        down = _rule(s.down_window_s, [{"type": "Percent", "value": 100, "periodSeconds": 15}])
    elif policy == "hpa":
        metrics = [_external(QUEUE_METRIC, deployment_id, s.hpa_target_queue_per_replica)]
        up = _rule(s.hpa_up_window_s, [{"type": "Percent", "value": int(s.hpa_up_percent_per_period),
                                        "periodSeconds": int(s.hpa_period_s)},
                                       {"type": "Pods", "value": s.hpa_up_pods_per_period,
                                        "periodSeconds": int(s.hpa_period_s)}])
        down = _rule(s.hpa_down_window_s, [{"type": "Percent", "value": int(s.hpa_down_percent_per_period),
                                            "periodSeconds": int(s.hpa_period_s)}])
    else:
        raise ValueError(f"policy {policy!r} has no HPA form (seed, hpa or gpuplane)")
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE, LABEL_DEPLOYMENT: deployment_id},
            "annotations": {"gpuplane.io/autoscale-policy": policy},
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": target_kind, "name": target_name},
            "minReplicas": max(1, s.min_replicas),
            "maxReplicas": max(1, s.max_replicas, s.min_replicas),
            "metrics": metrics,
            "behavior": {"scaleUp": up, "scaleDown": down},
        },
    }


def limitations(policy: str) -> list[str]:
    """What the native HPA of ``policy`` does differently from gpuplane's own loop."""
    notes = ["kube-scheduler places the replicas the HPA adds (no decision matrix), and removes them without "
             "gpuplane's mover"]
    if policy == "seed":
        notes.append("the seed's efficiency (> 10 TOPS/W) and cost (> $0.01 per inference) conditions have no "
                     "HPA form: only the queue threshold is kept")
    if policy == "gpuplane":
        notes.append("the SLO-at-risk veto on scale-down has no HPA form")
    return notes


def stabilization_windows(manifest: dict[str, Any]) -> tuple[float, float]:
    behavior = manifest["spec"]["behavior"]
    return (float(behavior["scaleUp"]["stabilizationWindowSeconds"]),
            float(behavior["scaleDown"]["stabilizationWindowSeconds"]))


def average_value(quantity: str) -> float:
    """The number a milli quantity stands for ("4500m" -> 4.5)."""
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
