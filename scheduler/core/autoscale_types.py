"""The words and data of autoscaling (``scheduler.core.autoscale`` has the rules): policies,
actions, the monitoring ``Sample``, the thresholds (``AutoscaleSettings``), a policy's memory
(``ScalingState``) and its answer (``Decision``). Pure Python."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

POLICIES = ("gpuplane", "hpa", "seed", "static")
DEFAULT_POLICY = "gpuplane"

UP = "up"
DOWN = "down"
HOLD = "hold"
NONE = "none"  # no decision: the inputs could not be trusted


@dataclass(frozen=True)
class Sample:
    """One monitoring observation of a deployment (None = the series was absent).

    Units: ``at`` seconds (same epoch as ``now``); ``queue`` requests waiting (summed over
    replicas, vLLM ``vllm:num_requests_waiting``); ``running`` requests being served;
    ``arrival_rps`` requests arriving per second; ``utilization_pct`` 0-100 GPU utilization of
    the deployment's GPUs; ``efficiency_tops_per_w`` tera-operations per second per watt the
    deployment really delivers; ``cost_per_inference_usd`` dollars per finished request;
    ``ttft_p95_s`` time to first token, 95th percentile, seconds; ``capacity_rps_per_replica``
    the requests per second one replica serves within the SLO (predicted at placement, times the
    feedback's correction factor); ``cold_start_s`` measured seconds from a replica's creation to
    ready; ``ready_replicas`` replicas serving.
    """

    at: float
    queue: float | None = None
    running: float | None = None
    arrival_rps: float | None = None
    utilization_pct: float | None = None
    efficiency_tops_per_w: float | None = None
    cost_per_inference_usd: float | None = None
    ttft_p95_s: float | None = None
    capacity_rps_per_replica: float | None = None
    cold_start_s: float | None = None
    ready_replicas: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class AutoscaleSettings:
    """Every threshold of every policy (docs/concepts.md lists them with their units).

    Settings ``GPUPLANE_AUTOSCALE`` give the defaults; a deployment's ``autoscale`` overrides
    any of them (``from_dict``).
    """

    min_replicas: int = 1
    max_replicas: int = 10
    max_sample_age_s: float = 90.0
    # seed 000
    seed_queue_up: float = 5.0
    seed_efficiency_up_tops_per_w: float = 10.0
    seed_up_step: int = 4
    seed_queue_down: float = 2.0
    seed_utilization_down_pct: float = 70.0
    seed_cost_down_usd: float = 0.01
    seed_down_step: int = 2
    seed_up_window_s: float = 60.0
    seed_down_window_s: float = 300.0
    # Kubernetes HPA v2 equivalent
    hpa_target_queue_per_replica: float = 5.0
    hpa_tolerance: float = 0.1
    hpa_up_window_s: float = 0.0
    hpa_down_window_s: float = 300.0
    hpa_up_pods_per_period: int = 4
    hpa_up_percent_per_period: float = 100.0
    hpa_down_percent_per_period: float = 100.0
    hpa_period_s: float = 15.0
    # gpuplane
    ttft_slo_s: float = 2.0
    tpot_slo_s: float = 0.2
    growth_per_min: float = 0.05
    default_cold_start_s: float = 60.0
    up_window_s: float = 10.0
    down_window_s: float = 300.0
    queue_budget_fraction: float = 0.5
    burst_margin: float = 0.25
    smoothing_s: float = 60.0
    trend_weight: float = 2.0
    down_step_interval_s: float = 300.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, base: AutoscaleSettings | None = None) -> AutoscaleSettings:
        """``base`` (or the defaults) with ``data``'s keys over it; raises ValueError for an
        unknown key or a bad value."""
        start = base or cls()
        if not data:
            return start
        known = {f.name: f for f in fields(cls)}
        unknown = set(data) - set(known)
        if unknown:
            raise ValueError(f"unknown autoscale settings: {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            number = float(value)
            if not math.isfinite(number) or number < 0:
                raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")
            values[key] = int(number) if known[key].type in (int, "int") else number
        result = replace(start, **values)
        if result.min_replicas > result.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        if result.min_replicas < 1:
            raise ValueError("min_replicas must be at least 1 (a deployment keeps a replica)")
        return result

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ScalingState:
    """What a policy remembers between evaluations of one deployment.

    ``replicas`` is the count asked for (spec). ``up_since`` / ``down_since``: since when the
    up / down condition has held on every sample (None: not holding). ``recommendations``: recent
    (time, replicas) recommendations for the windowed policies (hpa, gpuplane).
    """

    replicas: int
    up_since: float | None = None
    down_since: float | None = None
    last_up_at: float | None = None
    last_down_at: float | None = None
    recommendations: tuple[tuple[float, int], ...] = ()
    changes: tuple[tuple[float, int], ...] = field(default=())  # (time, new replicas), hpa rate limits
    load_rps: float = 0.0  # gpuplane: smoothed arrivals (requests/s) as of ``load_at``
    load_at: float | None = None
    trend_rps_per_s: float = 0.0


@dataclass(frozen=True)
class Decision:
    """One evaluation's outcome: ``action`` up / down / hold / none, ``replicas`` wanted."""

    policy: str
    action: str
    replicas: int
    current: int
    reason: str
    inputs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return self.action in (UP, DOWN)

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "action": self.action, "replicas": self.replicas, "current": self.current,
                "reason": self.reason, "inputs": dict(self.inputs)}
