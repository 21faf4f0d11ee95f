"""Autoscaling policies as pure functions (docs/design.md section 7; docs/concepts.md "Autoscaling").

One call = one evaluation of one deployment: ``decide(policy, sample, state, now, settings)``
takes the latest monitoring ``Sample``, the deployment's ``ScalingState`` and the clock, and
returns a ``Decision`` (the replicas wanted, why, and the inputs it read) with the next state.
Nothing here reads a clock, a database or Prometheus: the caller passes ``now`` (seconds, any
epoch), so the rules are tested with a controlled clock and replayed by
``bench/autoscale_replay.py`` exactly as the monitoring task runs them.

Policies:

- ``seed``: seed 000's rules, exactly. Up by ``up_step`` (4) when queue > ``queue_up`` (5) and
  efficiency > ``efficiency_up_tops_per_w`` (10 TOPS/W); down by ``down_step`` (2) when queue <
  ``queue_down`` (2), utilization < ``utilization_down_pct`` (70 %) and cost per inference >
  ``cost_down_usd`` ($0.01). A condition must hold on every sample for its stabilization window
  (60 s up, 300 s down) before it acts, and acts at most once per window.
- ``hpa``: what Kubernetes' HorizontalPodAutoscaler v2 does with an External metric of type
  AverageValue (the queue, target ``target_queue_per_replica``): desired = ceil(total / target),
  a 10 % tolerance, scale-up stabilization 0 s (the lowest recommendation of the window), scale-
  down 300 s (the highest), rate limits of its default behavior (up: max(100 %, 4 pods) per 15 s;
  down: 100 % per 15 s).
- ``gpuplane`` (default): sizes for the measured arrival rate (smoothed over ``smoothing_s``)
  against the replica capacity it predicts (corrected by feedback), with margins for what a cold
  start cannot follow: the load's rising trend times the measured cold start (``trend_weight``),
  a fixed ``growth_per_min`` over the cold start (``cold_start_headroom``: the threshold follows
  the measured cold start), and a square-root-staffing margin for sub-minute bursts
  (``burst_margin``). It scales up once the recommendation has exceeded the replicas for
  ``up_window_s`` (10 s: the 15 s promise less one 5 s sample), and at once when the queue
  crosses what the ready replicas clear inside part of the TTFT objective (``queue_threshold``).
  Scale-down takes the highest recommendation of the last ``down_window_s`` (300 s), waits
  300 s after any change and never happens while the SLO is at risk (queue over its threshold
  or TTFT p95 over the objective). Efficiency and cost never decide *whether*: they rank
  *where* a new replica goes (``rank_targets``) and *which* leaves first (``choose_victim``).
- ``static``: never changes anything (the ``static-peak`` baseline of the replay).

A sample with a required series missing, NaN or infinite, or older than ``max_sample_age_s``
yields no decision (``Decision.action == "none"``) with the reason; the state's windows restart
so a stale burst never acts later.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from scheduler.core.autoscale_choice import ReplicaView, Target, choose_victim, rank_targets, reversals
from scheduler.core.autoscale_types import (
    DEFAULT_POLICY,
    DOWN,
    HOLD,
    NONE,
    POLICIES,
    UP,
    AutoscaleSettings,
    Decision,
    Sample,
    ScalingState,
)

__all__ = [
    "DEFAULT_POLICY", "DOWN", "HOLD", "NONE", "POLICIES", "REQUIRED", "UP", "AutoscaleSettings", "Decision",
    "ReplicaView", "Sample", "ScalingState", "Target", "choose_victim", "clamp", "cold_start_headroom", "decide",
    "queue_threshold", "rank_targets", "reversals", "untrusted",
]

REQUIRED: dict[str, tuple[str, ...]] = {
    "seed": ("queue", "efficiency_tops_per_w", "utilization_pct", "cost_per_inference_usd"),
    "hpa": ("queue",),
    "gpuplane": ("queue", "arrival_rps", "capacity_rps_per_replica"),
    "static": (),
}


def untrusted(policy: str, sample: Sample, now: float, settings: AutoscaleSettings) -> str | None:
    """Why ``sample`` cannot be acted on (None: it can)."""
    age = now - sample.at
    if age > settings.max_sample_age_s:
        return f"stale sample: {age:.0f} s old (max {settings.max_sample_age_s:.0f} s)"
    for name in REQUIRED[policy]:
        value = getattr(sample, name)
        if value is None:
            return f"missing series: {name}"
        if not math.isfinite(value):
            return f"not a number: {name} = {value}"
    for name in ("ttft_p95_s", "cold_start_s"):  # optional, but never trusted when broken
        value = getattr(sample, name)
        if value is not None and not math.isfinite(value):
            return f"not a number: {name} = {value}"
    return None


def clamp(replicas: int, settings: AutoscaleSettings) -> int:
    return max(settings.min_replicas, min(settings.max_replicas, replicas))


def decide(policy: str, sample: Sample, state: ScalingState, now: float,
           settings: AutoscaleSettings | None = None) -> tuple[Decision, ScalingState]:
    """Evaluate ``policy`` once; returns the decision and the state to keep for the next call."""
    settings = settings or AutoscaleSettings()
    if policy not in POLICIES:
        raise ValueError(f"unknown autoscale policy {policy!r} (known: {', '.join(POLICIES)})")
    reason = untrusted(policy, sample, now, settings)
    if reason is not None:
        # No action, and windows restart: a condition must be seen to hold, not assumed.
        kept = replace(state, up_since=None, down_since=None)
        return Decision(policy, NONE, state.replicas, state.replicas, reason, sample.to_dict()), kept
    if policy == "static":
        return _hold(policy, state, "static: replicas never change", sample.to_dict()), state
    if policy == "seed":
        return _seed(sample, state, now, settings)
    if policy == "hpa":
        return _hpa(sample, state, now, settings)
    return _gpuplane(sample, state, now, settings)


def _hold(policy: str, state: ScalingState, reason: str, inputs: Mapping[str, Any]) -> Decision:
    return Decision(policy, HOLD, state.replicas, state.replicas, reason, inputs)


def _change(policy: str, state: ScalingState, wanted: int, reason: str, inputs: Mapping[str, Any],
            settings: AutoscaleSettings) -> Decision:
    wanted = clamp(wanted, settings)
    if wanted == state.replicas:
        bound = "max" if wanted >= settings.max_replicas else "min"
        return _hold(policy, state, f"{reason}, but already at {bound} replicas ({wanted})", inputs)
    return Decision(policy, UP if wanted > state.replicas else DOWN, wanted, state.replicas, reason, inputs)


def _held_for(since: float | None, holds: bool, now: float) -> float | None:
    """The start of the current run of samples on which a condition holds."""
    if not holds:
        return None
    return now if since is None else since


def _seed(sample: Sample, state: ScalingState, now: float,
          s: AutoscaleSettings) -> tuple[Decision, ScalingState]:
    queue = float(sample.queue)  # type: ignore[arg-type]
    efficiency = float(sample.efficiency_tops_per_w)  # type: ignore[arg-type]
    utilization = float(sample.utilization_pct)  # type: ignore[arg-type]
    cost = float(sample.cost_per_inference_usd)  # type: ignore[arg-type]
    inputs = sample.to_dict()
    up = queue > s.seed_queue_up and efficiency > s.seed_efficiency_up_tops_per_w
    down = queue < s.seed_queue_down and utilization < s.seed_utilization_down_pct and cost > s.seed_cost_down_usd
    up_since = _held_for(state.up_since, up, now)
    down_since = _held_for(state.down_since, down, now)
    state = replace(state, up_since=up_since, down_since=down_since)
    if up and up_since is not None and now - up_since >= s.seed_up_window_s:
        decision = _change("seed", state, state.replicas + s.seed_up_step,
                           f"queue {queue:g} > {s.seed_queue_up:g} and efficiency {efficiency:g} > "
                           f"{s.seed_efficiency_up_tops_per_w:g} TOPS/W for {s.seed_up_window_s:g} s", inputs, s)
        if decision.changes:  # the window restarts: at most one step per window
            return decision, replace(state, replicas=decision.replicas, up_since=now, last_up_at=now)
        return decision, state
    if down and down_since is not None and now - down_since >= s.seed_down_window_s:
        decision = _change("seed", state, state.replicas - s.seed_down_step,
                           f"queue {queue:g} < {s.seed_queue_down:g}, utilization {utilization:g} % < "
                           f"{s.seed_utilization_down_pct:g} % and cost per inference ${cost:g} > "
                           f"${s.seed_cost_down_usd:g} for {s.seed_down_window_s:g} s", inputs, s)
        if decision.changes:
            return decision, replace(state, replicas=decision.replicas, down_since=now, last_down_at=now)
        return decision, state
    if up:
        why = f"queue and efficiency over the seed's thresholds for {now - up_since:.0f} s of {s.seed_up_window_s:g} s"  # type: ignore[operator]
    elif down:
        why = f"load under the seed's thresholds for {now - down_since:.0f} s of {s.seed_down_window_s:g} s"  # type: ignore[operator]
    elif queue > s.seed_queue_up:
        why = (f"queue {queue:g} > {s.seed_queue_up:g} but efficiency {efficiency:g} TOPS/W is not over "
               f"{s.seed_efficiency_up_tops_per_w:g}: the seed does not scale up")
    else:
        why = "no seed rule holds"
    return _hold("seed", state, why, inputs), state


def _windowed(state: ScalingState, now: float, recommendation: int, keep_s: float) -> tuple[tuple[float, int], ...]:
    kept = tuple((at, r) for at, r in state.recommendations if now - at <= keep_s)
    return kept + ((now, recommendation),)


def _stabilized(recommendations: Sequence[tuple[float, int]], now: float, current: int,
                up_window_s: float, down_window_s: float) -> int:
    """HPA's stabilization: up to the lowest recommendation of the up window, down to the highest
    of the down window (the newest recommendation is always in both)."""
    up_window = [r for at, r in recommendations if now - at <= up_window_s]
    down_window = [r for at, r in recommendations if now - at <= down_window_s]
    newest = recommendations[-1][1]
    if newest > current:
        return max(current, min(up_window))
    if newest < current:
        return min(current, max(down_window))
    return current


def _hpa(sample: Sample, state: ScalingState, now: float, s: AutoscaleSettings) -> tuple[Decision, ScalingState]:
    queue = float(sample.queue)  # type: ignore[arg-type]
    inputs = sample.to_dict()
    current = state.replicas
    ratio = queue / (s.hpa_target_queue_per_replica * current) if current else math.inf
    if abs(ratio - 1.0) <= s.hpa_tolerance:
        recommendation = current
    else:
        recommendation = math.ceil(queue / s.hpa_target_queue_per_replica) if s.hpa_target_queue_per_replica else current
    recommendation = clamp(recommendation, s)
    history = _windowed(state, now, recommendation, max(s.hpa_up_window_s, s.hpa_down_window_s))
    state = replace(state, recommendations=history)
    wanted = _stabilized(history, now, current, s.hpa_up_window_s, s.hpa_down_window_s)
    # Rate limits over the last period, as the HPA controller applies its behavior policies.
    changes = tuple((at, r) for at, r in state.changes if now - at < s.hpa_period_s)
    start = changes[0][1] if changes else current
    if wanted > current:
        limit = max(start + s.hpa_up_pods_per_period, math.floor(start * (1 + s.hpa_up_percent_per_period / 100)))
        wanted = min(wanted, max(current, limit))
    elif wanted < current:
        limit = math.ceil(start * (1 - s.hpa_down_percent_per_period / 100))
        wanted = max(wanted, min(current, limit))
    reason = (f"queue {queue:g} over {current} replicas against a target of {s.hpa_target_queue_per_replica:g} "
              f"per replica: {recommendation} recommended")
    if wanted == current:
        return _hold("hpa", state, reason, inputs), replace(state, changes=changes)
    decision = _change("hpa", state, wanted, reason, inputs, s)
    if not decision.changes:
        return decision, replace(state, changes=changes)
    state = replace(state, replicas=decision.replicas, changes=changes + ((now, current),))
    if decision.action == UP:
        return decision, replace(state, last_up_at=now)
    return decision, replace(state, last_down_at=now)


def _ewma(previous: float, value: float, elapsed: float, time_constant: float) -> float:
    if time_constant <= 0 or elapsed <= 0:
        return value if elapsed > 0 or time_constant <= 0 else previous
    weight = 1 - math.exp(-elapsed / time_constant)
    return previous + weight * (value - previous)


def cold_start_headroom(cold_start_s: float, settings: AutoscaleSettings) -> float:
    """Extra capacity, as a fraction of the load, for the growth that may come while a new replica
    starts: the longer the measured cold start, the earlier gpuplane scales."""
    return settings.growth_per_min * (cold_start_s + settings.up_window_s) / 60.0


def queue_threshold(capacity_rps: float, ready: int, settings: AutoscaleSettings) -> float:
    """The backlog (requests waiting) that the ready replicas clear within a fraction of the TTFT
    objective; above it the SLO is at risk."""
    return max(1.0, capacity_rps * max(ready, 1) * settings.ttft_slo_s * settings.queue_budget_fraction)


def _gpuplane(sample: Sample, state: ScalingState, now: float,
              s: AutoscaleSettings) -> tuple[Decision, ScalingState]:
    queue = float(sample.queue)  # type: ignore[arg-type]
    arrival = float(sample.arrival_rps)  # type: ignore[arg-type]
    capacity = float(sample.capacity_rps_per_replica)  # type: ignore[arg-type]
    if capacity <= 0:
        kept = replace(state, up_since=None, down_since=None)
        return Decision("gpuplane", NONE, state.replicas, state.replicas,
                        f"replica capacity {capacity:g} req/s is not positive", sample.to_dict()), kept
    cold_start = sample.cold_start_s if sample.cold_start_s is not None else s.default_cold_start_s
    ready = int(sample.ready_replicas) if sample.ready_replicas is not None else state.replicas
    headroom = cold_start_headroom(cold_start, s)
    threshold = queue_threshold(capacity, ready, s)
    # Requests waiting beyond what the replicas asked for (starting ones included) clear within
    # the TTFT objective are extra load; a new replica helps with it only after its cold start.
    backlog_rps = max(0.0, queue - queue_threshold(capacity, state.replicas, s)) / (cold_start + s.ttft_slo_s)
    # The load is smoothed (exponentially, time constant ``smoothing_s``) so that a noisy window
    # neither scales up nor, through the scale-down window's maximum, holds replicas; a queue over
    # the threshold (SLO at risk) sizes for the raw rate at once.
    smoothed = arrival if state.load_at is None else _ewma(state.load_rps, arrival, now - state.load_at, s.smoothing_s)
    # The load's trend (requests/s per second, smoothed alike): what it adds during a cold start.
    slope = 0.0 if state.load_at is None or now <= state.load_at else (smoothed - state.load_rps) / (now - state.load_at)
    trend = slope if state.load_at is None else _ewma(state.trend_rps_per_s, slope, now - state.load_at, s.smoothing_s)
    at_risk = queue > threshold or (sample.ttft_p95_s is not None and sample.ttft_p95_s > s.ttft_slo_s)
    load = max(arrival, smoothed) if at_risk else smoothed
    # Square-root staffing (Halfin-Whitt): a margin for the sub-minute bursts of the arrivals that
    # no cold start can follow, growing with the square root of the offered load.
    rising = max(0.0, trend) * (cold_start + s.up_window_s) * s.trend_weight
    offered = (load * (1 + headroom) + rising + backlog_rps) / capacity
    sized = math.ceil(offered + s.burst_margin * math.sqrt(offered) - 1e-9)
    recommendation = clamp(max(sized, 1), s)
    state = replace(state, load_rps=smoothed, load_at=now, trend_rps_per_s=trend)
    inputs = {**sample.to_dict(), "smoothed_rps": round(smoothed, 4), "headroom": round(headroom, 4),
              "queue_threshold": round(threshold, 3),
              "recommended": recommendation, "slo_at_risk": at_risk}
    history = _windowed(state, now, recommendation, s.down_window_s)
    up = recommendation > state.replicas
    up_since = _held_for(state.up_since, up, now)
    state = replace(state, recommendations=history, up_since=up_since)
    if up and up_since is not None and (now - up_since >= s.up_window_s or at_risk):
        # The highest recommendation seen since the crossing: a burst is met in one step.
        wanted = max(r for at, r in history if at >= up_since)
        reason = (f"arrivals {arrival:.2f} req/s x (1 + {headroom:.2f} cold-start headroom) + backlog over "
                  f"{capacity:.2f} req/s per replica need {wanted}" + ("; SLO at risk" if at_risk else ""))
        decision = _change("gpuplane", state, wanted, reason, inputs, s)
        if decision.changes:
            return decision, replace(state, replicas=decision.replicas, up_since=None, last_up_at=now)
        return decision, state
    if up:
        return _hold("gpuplane", state, f"{recommendation} needed for {now - up_since:.0f} s of "  # type: ignore[operator]
                     f"{s.up_window_s:g} s", inputs), state
    # Down: the highest recommendation of the window, only once a full window has been seen since
    # the last change, and never while the SLO is at risk.
    last_up = state.last_up_at
    last_change = max((t for t in (state.last_up_at, state.last_down_at) if t is not None), default=None)
    window_start = history[0][0]
    seen_window = now - window_start >= s.down_window_s - 1e-9 or (last_change is not None and now - last_change >= s.down_window_s)
    wanted = max(r for at, r in history if now - at <= s.down_window_s)
    if wanted < state.replicas:
        if at_risk:
            return _hold("gpuplane", state, "fewer replicas would do, but the SLO is at risk", inputs), state
        if last_up is not None and now - last_up < s.down_window_s:
            return _hold("gpuplane", state, f"scale-down waits {s.down_window_s:g} s after a scale-up", inputs), state
        if state.last_down_at is not None and now - state.last_down_at < s.down_step_interval_s:
            return _hold("gpuplane", state, f"scale-down steps are {s.down_step_interval_s:g} s apart", inputs), state
        if not seen_window:
            return _hold("gpuplane", state, f"scale-down needs {s.down_window_s:g} s of recommendations", inputs), state
        reason = f"at most {wanted} needed over the last {s.down_window_s:g} s"
        decision = _change("gpuplane", state, wanted, reason, inputs, s)
        if decision.changes:
            return decision, replace(state, replicas=decision.replicas, last_down_at=now)
        return decision, state
    return _hold("gpuplane", state, f"{recommendation} replicas recommended, {state.replicas} running", inputs), state
