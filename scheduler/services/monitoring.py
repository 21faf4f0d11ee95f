"""Monitoring a deployment for its autoscaler: one ``Sample`` every evaluation.

Sources (``AUTOSCALE_METRICS_SOURCE``):

- ``prometheus``: the serving engine's own metrics at ``GPUPLANE_PROMETHEUS_URL``, one instant
  query per series from ``AUTOSCALE_QUERIES[AUTOSCALE_RUNTIME]`` (vLLM's
  ``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:time_to_first_token_seconds``,
  ``vllm:e2e_request_latency_seconds``, token counters; SGLang's equivalents), ``{selector}``
  replaced by the deployment's label matchers. An empty answer is a missing series (the policy
  then makes no decision and says so); an unreachable Prometheus likewise.
- ``simulated``: the simulated cluster's request stream for the deployment: the Azure LLM
  inference trace's arrivals per minute (``AZURE_CONV_PER_MINUTE``, looped, times
  ``AUTOSCALE_SIMULATED_LOAD_FACTOR`` and the deployment's own ``sim_load_factor``) served by
  its running replicas at their predicted capacity (``scheduler.core.serving``, times the
  feedback's correction factor); what is not served waits in a queue that carries over.
- ``none``: no series at all (the policies make no decision).

The deployment-level figures come from gpuplane's own data either way: utilization and power
share of its GPUs (telemetry), efficiency (TOPS/W: 2 x parameters x tokens per second over the
power share, parameters estimated from the model's memory at 2 bytes each), cost per inference
(GPU price per hour x share, over requests finished per hour), the predicted capacity per
replica, and the cold start measured from its placements (creation to running).
"""
from __future__ import annotations

import json
import logging
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from statistics import fmean

from django.conf import settings

from lifecycle.models import AuditEvent
from nodes.catalog import CATALOG
from nodes.contract import LABEL_DEPLOYMENT
from nodes.gpu_costs import gpu_prices
from nodes.models import GPU
from scheduler.choices import PlacementStatus
from scheduler.core.autoscale import Sample
from scheduler.core.serving import GPU_FIGURES, figures_for, predict_capacity
from scheduler.models import CorrectionFactor, Deployment, Placement
from scheduler.services.releasing import ACTIVE_PLACEMENT
from scheduler.services.scaling_config import autoscale_settings

logger = logging.getLogger(__name__)

# Requests per minute of Azure's conversation trace (shared/data/azure-llm-inference-2023,
# AzureLLMInferenceTrace_conv.csv, 2023-11-16 18:15-19:13 UTC; CC-BY 4.0, Patel et al., ISCA'24).
AZURE_CONV_PER_MINUTE = (
    191, 265, 329, 353, 307, 273, 268, 261, 322, 298, 301, 302, 345, 326, 283, 279, 280, 308, 343, 351, 351,
    343, 408, 396, 386, 398, 432, 480, 476, 453, 448, 507, 438, 413, 423, 418, 465, 311, 329, 316, 333, 355,
    319, 360, 334, 375, 330, 249, 221, 249, 265, 280, 256, 254, 242, 260, 246, 225,
)
MEAN_PROMPT_TOKENS = 1155  # the same trace's means
MEAN_OUTPUT_TOKENS = 211
DEFAULT_CAPACITY_RPS = 1.0  # a replica on a GPU model without serving figures, before feedback
PREFILL_S = 0.3  # the simulated stream's time to first token on an idle replica


def _gpu_model(placement: Placement) -> str:
    return placement.node.gpu_model if placement.node is not None else ""


def correction(model: str, gpu_model: str, sharing: str) -> float:
    row = CorrectionFactor.objects.filter(model=model, gpu_model=gpu_model, sharing_mode=sharing).first()
    return row.factor if row is not None else 1.0


def predicted_capacity(gpu_model: str, sharing: str, share_milli: int, tpot_slo_s: float) -> float:
    """Requests/s one replica serves within the TPOT objective on ``gpu_model`` (serving model)."""
    if gpu_model not in GPU_FIGURES:
        model = CATALOG.get(gpu_model)
        if model is None:
            return DEFAULT_CAPACITY_RPS
        # Scale the A100's prediction by compute: a stated approximation for boards without figures.
        reference = predict_capacity(figures_for("A100-SXM4-40GB"), MEAN_PROMPT_TOKENS, MEAN_OUTPUT_TOKENS, tpot_slo_s)
        return reference.capacity_rps * model.fp16_tflops / 312.0 * (share_milli or 1000) / 1000
    mode = sharing if sharing in ("mps", "mps-weighted", "mig", "timeslice") else "exclusive"
    figures = figures_for(gpu_model, mode, share_milli or 1000)
    capacity = predict_capacity(figures, MEAN_PROMPT_TOKENS, MEAN_OUTPUT_TOKENS, tpot_slo_s).capacity_rps
    # A share too small to hold the reference model's weights says nothing about a smaller model:
    # fall back to the default, in proportion to the share.
    return capacity if capacity > 0 else DEFAULT_CAPACITY_RPS * (share_milli or 1000) / 1000


def measured_cold_start_s(deployment: Deployment, limit: int = 20) -> float | None:
    """Mean seconds from a placement's creation to its ``placement.running`` event, over the
    deployment's newest placements that got there (None before any did)."""
    placements = {str(p.pk): p.created_at for p in deployment.placements.order_by("-created_at")[:limit]}
    if not placements:
        return None
    events = AuditEvent.objects.filter(verb="placement.running", object_type="scheduler.placement",
                                       object_id__in=list(placements)).values_list("object_id", "at")
    spans = [(at - placements[pk]).total_seconds() for pk, at in events if placements.get(pk) is not None]
    spans = [s for s in spans if s >= 0]
    return fmean(spans) if spans else None


def _telemetry(placements: list[Placement]) -> tuple[float | None, float, float]:
    """(mean GPU utilization %, power share W, price share USD/h) of the placements' GPUs."""
    prices = gpu_prices()
    utilizations: list[float] = []
    power = 0.0
    price = 0.0
    for p in placements:
        if p.node is None:
            continue
        share = (p.share_milli or 1000) / 1000
        for gpu in GPU.objects.filter(node=p.node, index__in=p.gpu_indexes or [0]):
            if gpu.utilization_pct is not None:
                utilizations.append(gpu.utilization_pct)
            catalog = CATALOG.get(gpu.model)
            power += share * (gpu.power_w if gpu.power_w is not None else (catalog.tdp_w if catalog else 0.0))
            if gpu.model in prices:
                price += share * prices[gpu.model].usd_per_hour
    return (fmean(utilizations) if utilizations else None), power, price


class PrometheusUnavailable(Exception):
    pass


def _instant(url: str, promql: str, timeout_s: float = 5.0) -> float | None:
    """One instant query's single value (summed over the vector); None for an empty answer."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    request = urllib.request.Request(address, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            payload = json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as error:
        raise PrometheusUnavailable(f"Prometheus at {url}: {getattr(error, 'reason', error)}") from error
    if not isinstance(payload, dict) or payload.get("status") != "success":
        raise PrometheusUnavailable(f"Prometheus at {url} reported an error: {str(payload)[:200]}")
    result = payload.get("data", {}).get("result", [])
    values = []
    for item in result:
        try:
            values.append(float(item["value"][1]))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return sum(values) if values else None


def selector(deployment: Deployment) -> str:
    """Prometheus label matchers of a deployment's pods (the pod label as Prometheus relabels it)."""
    label = LABEL_DEPLOYMENT.replace(".", "_").replace("/", "_").replace("-", "_")
    return f'namespace="{deployment.namespace}",{label}="{deployment.pk}"'


def prometheus_series(deployment: Deployment) -> dict[str, float | None]:
    url = settings.GPUPLANE_PROMETHEUS_URL
    queries = settings.AUTOSCALE_QUERIES.get(settings.AUTOSCALE_RUNTIME, {})
    if not url or not queries:
        return {}
    matchers = selector(deployment)
    series: dict[str, float | None] = {}
    for name, template in queries.items():
        try:
            series[name] = _instant(url, template.format(selector=matchers))
        except PrometheusUnavailable as error:
            logger.warning("autoscale: %s", error)
            return {}
    return series


def load_rps(at: datetime, factor: float) -> float:
    """The simulated stream's arrival rate at ``at`` (requests per second)."""
    minute = int(at.timestamp() // 60) % len(AZURE_CONV_PER_MINUTE)
    return AZURE_CONV_PER_MINUTE[minute] / 60.0 * factor


def simulated_series(deployment: Deployment, placements: list[Placement], predicted: dict[int, float],
                     at: datetime) -> dict[str, float | None]:
    """The simulated stream served by the running replicas (a fluid queue, carried in the state).
    A replica serves its uncorrected prediction times its GPU model's ``AUTOSCALE_SIMULATED_DELIVERY``."""
    delivery = settings.AUTOSCALE_SIMULATED_DELIVERY
    capacities = {p.pk: predicted[p.pk] * delivery.get(_gpu_model(p), 1.0) for p in placements}
    state = dict(deployment.autoscale_state or {})
    # The deployment's own factor (``sim_load_factor`` in its state: the demo's and tests' load step).
    factor = settings.AUTOSCALE_SIMULATED_LOAD_FACTOR * float(state.get("sim_load_factor", 1.0))
    arrival = load_rps(at, factor)
    serving = sum(capacities[p.pk] for p in placements if p.status == PlacementStatus.RUNNING)
    previous_at = state.get("sim_at")
    elapsed = min(60.0, max(0.0, at.timestamp() - float(previous_at))) if previous_at is not None else 0.0
    queue = max(0.0, float(state.get("sim_queue", 0.0)) + (arrival - serving) * elapsed)
    finished = min(serving, arrival + (queue / elapsed if elapsed else 0.0))
    ttft = PREFILL_S + (queue / serving if serving > 0 else (math.inf if queue or arrival else 0.0))
    deployment.autoscale_state = {**state, "sim_queue": queue, "sim_at": at.timestamp()}
    return {
        "queue": queue,
        "running": min(arrival, serving) * (PREFILL_S + MEAN_OUTPUT_TOKENS * 0.1),
        "arrival_rps": arrival,
        "finished_rps": finished,
        "tokens_per_s": finished * (MEAN_PROMPT_TOKENS + MEAN_OUTPUT_TOKENS),
        "ttft_p95_s": ttft if math.isfinite(ttft) else 60.0,
    }


@dataclass(frozen=True)
class Observation:
    """Measured against predicted requests/s per replica of one GPU model and sharing mode (taken
    only while requests wait: a replica with nothing queued shows its load, not its capacity)."""

    gpu_model: str
    sharing_mode: str
    predicted_rps: float
    measured_rps: float


def sample_for(deployment: Deployment, at: datetime) -> Sample:
    return monitor(deployment, at)[0]


def monitor(deployment: Deployment, at: datetime) -> tuple[Sample, list[Observation]]:
    """The deployment's monitoring sample at ``at`` from the configured source, and what the
    feedback can learn from it."""
    source = settings.AUTOSCALE_METRICS_SOURCE
    placements = list(Placement.objects.filter(deployment=deployment, status__in=ACTIVE_PLACEMENT)
                      .select_related("node"))
    config = autoscale_settings(deployment)
    uncorrected = {p.pk: predicted_capacity(_gpu_model(p), p.sharing, p.share_milli, config.tpot_slo_s)
                   for p in placements}
    capacities = {p.pk: uncorrected[p.pk] * correction(deployment.model, _gpu_model(p), p.sharing)
                  for p in placements}
    if source == "prometheus":
        series = prometheus_series(deployment)
    elif source == "simulated":
        series = simulated_series(deployment, placements, uncorrected, at)
    else:
        series = {}
    utilization, power, price = _telemetry(placements)
    tokens = series.get("tokens_per_s")
    finished = series.get("finished_rps")
    parameters = deployment.memory_mib * 1024 * 1024 / 2  # FP16 weights: 2 bytes per parameter
    efficiency = (2 * parameters * tokens / 1e12 / power) if tokens is not None and power > 0 else None
    cost = (price / (finished * 3600)) if finished else None
    running = [p for p in placements if p.status == PlacementStatus.RUNNING]
    capacity = fmean(capacities.values()) if capacities else None
    sample = Sample(
        at=at.timestamp(), queue=series.get("queue"), running=series.get("running"),
        arrival_rps=series.get("arrival_rps"), utilization_pct=utilization, efficiency_tops_per_w=efficiency,
        cost_per_inference_usd=cost, ttft_p95_s=series.get("ttft_p95_s"), capacity_rps_per_replica=capacity,
        cold_start_s=measured_cold_start_s(deployment), ready_replicas=float(len(running)),
    )
    observations: list[Observation] = []
    queue = series.get("queue")
    if running and finished is not None and queue is not None and queue > 0:
        groups: dict[tuple[str, str], list[Placement]] = {}
        for p in running:
            groups.setdefault((_gpu_model(p), p.sharing), []).append(p)
        predicted_total = sum(uncorrected[p.pk] for p in running)
        for (gpu_model, sharing), members in groups.items():
            predicted = fmean(uncorrected[p.pk] for p in members)
            # Finished requests split by predicted share: each group is measured against its own
            # prediction (with one GPU model, simply finished per replica).
            share = sum(uncorrected[p.pk] for p in members) / predicted_total if predicted_total else 0.0
            observations.append(Observation(gpu_model, sharing, predicted, finished * share / len(members)))
    return sample, observations
