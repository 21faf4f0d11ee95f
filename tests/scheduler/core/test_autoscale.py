"""Autoscaling rules with a controlled clock (issue 22, must-show 1): every policy is a pure
function of (sample, state, now), so the tests drive time by hand."""
from __future__ import annotations

import math

import pytest

from scheduler.core.autoscale import (
    DOWN,
    HOLD,
    NONE,
    UP,
    AutoscaleSettings,
    ReplicaView,
    Sample,
    ScalingState,
    Target,
    choose_victim,
    cold_start_headroom,
    decide,
    queue_threshold,
    rank_targets,
    reversals,
)

SETTINGS = AutoscaleSettings(min_replicas=1, max_replicas=20)


def seed_sample(at: float, queue: float, efficiency: float = 20.0, utilization: float = 90.0,
                cost: float = 0.001) -> Sample:
    return Sample(at=at, queue=queue, efficiency_tops_per_w=efficiency, utilization_pct=utilization,
                  cost_per_inference_usd=cost)


def run(policy: str, samples, state: ScalingState, settings: AutoscaleSettings = SETTINGS):
    """Feed samples in order (each taken at its own ``at``); returns decisions and final state."""
    decisions = []
    for sample in samples:
        decision, state = decide(policy, sample, state, sample.at, settings)
        decisions.append(decision)
        if decision.changes:
            state = ScalingState(**{**state.__dict__, "replicas": decision.replicas})
    return decisions, state


# ---- seed 000 ------------------------------------------------------------------------------

def test_seed_burst_scales_up_by_four_once_per_window():
    samples = [seed_sample(t, queue=50) for t in range(0, 181, 5)]
    decisions, state = run("seed", samples, ScalingState(replicas=2))
    ups = [(d.inputs["at"], d.replicas) for d in decisions if d.action == UP]
    # held from t=0: first step at 60 s, then one per further 60 s, 4 replicas each
    assert ups == [(60, 6), (120, 10), (180, 14)]
    assert state.replicas == 14


def test_seed_needs_efficiency_to_scale_up():
    decisions, state = run("seed", [seed_sample(t, queue=50, efficiency=2.0) for t in range(0, 301, 10)],
                           ScalingState(replicas=2))
    assert all(d.action == HOLD for d in decisions)
    assert "efficiency" in decisions[-1].reason and state.replicas == 2


def test_seed_scales_down_by_two_after_300_s_when_all_three_conditions_hold():
    quiet = [seed_sample(t, queue=0, utilization=30, cost=0.05) for t in range(0, 601, 30)]
    decisions, state = run("seed", quiet, ScalingState(replicas=8))
    downs = [(d.inputs["at"], d.replicas) for d in decisions if d.action == DOWN]
    assert downs == [(300, 6), (600, 4)]
    # cost per inference below $0.01: never down
    cheap = [seed_sample(t, queue=0, utilization=30, cost=0.005) for t in range(0, 601, 30)]
    decisions, state = run("seed", cheap, ScalingState(replicas=8))
    assert state.replicas == 8 and not any(d.changes for d in decisions)


def test_seed_flapping_load_does_not_flap_replicas():
    samples = [seed_sample(t, queue=50 if (t // 30) % 2 == 0 else 0, utilization=30, cost=0.05)
               for t in range(0, 1201, 30)]
    decisions, state = run("seed", samples, ScalingState(replicas=4))
    assert not any(d.changes for d in decisions)
    assert state.replicas == 4


def test_seed_honours_min_and_max():
    settings = AutoscaleSettings(min_replicas=3, max_replicas=7)
    decisions, state = run("seed", [seed_sample(t, queue=50) for t in range(0, 301, 10)],
                           ScalingState(replicas=5), settings)
    assert state.replicas == 7
    assert [d.replicas for d in decisions if d.changes] == [7]
    assert "already at max replicas" in decisions[-1].reason
    decisions, state = run("seed", [seed_sample(t, queue=0, utilization=10, cost=1.0) for t in range(0, 1201, 30)],
                           ScalingState(replicas=4), settings)
    assert state.replicas == 3


# ---- untrusted inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["seed", "hpa", "gpuplane"])
@pytest.mark.parametrize(("sample", "reason"), [
    (Sample(at=100.0), "missing series"),
    (Sample(at=100.0, queue=math.nan, arrival_rps=50.0, capacity_rps_per_replica=1.0,
            efficiency_tops_per_w=20.0, utilization_pct=90.0, cost_per_inference_usd=0.1), "not a number: queue"),
    (Sample(at=100.0, queue=500.0, arrival_rps=50.0, capacity_rps_per_replica=1.0, efficiency_tops_per_w=20.0,
            utilization_pct=90.0, cost_per_inference_usd=0.1, ttft_p95_s=math.inf), "not a number: ttft_p95_s"),
    (Sample(at=0.0, queue=500.0, arrival_rps=50.0, capacity_rps_per_replica=1.0, efficiency_tops_per_w=20.0,
            utilization_pct=90.0, cost_per_inference_usd=0.1), "stale sample"),
])
def test_untrusted_samples_give_no_decision_with_the_reason(policy, sample, reason):
    state = ScalingState(replicas=4, up_since=0.0, down_since=0.0)
    decision, kept = decide(policy, sample, state, 100.0, SETTINGS)
    assert decision.action == NONE and not decision.changes
    assert decision.replicas == 4 and reason in decision.reason
    # the windows restart: a burst seen before the gap must be seen again to act
    assert kept.up_since is None and kept.down_since is None


def test_a_gap_in_the_series_restarts_the_seed_window():
    samples = [seed_sample(t, queue=50) for t in range(0, 50, 10)]
    samples.append(Sample(at=50.0))  # queue series missing
    samples += [seed_sample(t, queue=50) for t in range(60, 115, 10)]
    decisions, state = run("seed", samples, ScalingState(replicas=2))
    assert state.replicas == 2  # 60 s of holding from t=60 is not over at t=110
    decision, _ = decide("seed", seed_sample(120, queue=50), state, 120, SETTINGS)
    assert decision.action == UP


# ---- hpa equivalent --------------------------------------------------------------------------

def test_hpa_scales_up_at_once_within_its_rate_limit_and_down_after_300_s():
    settings = AutoscaleSettings(min_replicas=1, max_replicas=50, hpa_target_queue_per_replica=5)
    decision, state = decide("hpa", Sample(at=0.0, queue=100.0), ScalingState(replicas=2), 0.0, settings)
    # 20 wanted; the default behavior allows max(100 %, 4 pods) per 15 s: 2 -> 6
    assert (decision.action, decision.replicas) == (UP, 6)
    decision, state = decide("hpa", Sample(at=15.0, queue=100.0), state, 15.0, settings)
    assert decision.replicas == 12
    samples = [Sample(at=float(t), queue=0.0) for t in range(30, 331, 15)]
    decisions, state = run("hpa", samples, state, settings)
    downs = [d for d in decisions if d.action == DOWN]
    assert downs and downs[0].inputs["at"] >= 15 + 300  # the highest recommendation of 300 s holds it


def test_hpa_tolerance_keeps_replicas():
    decision, _ = decide("hpa", Sample(at=0.0, queue=21.0), ScalingState(replicas=4), 0.0, SETTINGS)
    assert decision.action == HOLD  # 21 / (5 x 4) = 1.05, inside the 10 % tolerance


# ---- gpuplane ------------------------------------------------------------------------------

def load(at: float, rps: float, queue: float = 0.0, ready: float | None = None, ttft: float | None = 0.5,
         cold: float | None = 45.0) -> Sample:
    return Sample(at=at, queue=queue, arrival_rps=rps, capacity_rps_per_replica=1.0, ttft_p95_s=ttft,
                  cold_start_s=cold, ready_replicas=ready)


def test_gpuplane_reacts_within_15_s_of_a_queue_crossing_its_threshold():
    state = ScalingState(replicas=4)
    for t in range(0, 301, 5):  # settled at 3 req/s
        _, state = decide("gpuplane", load(t, 3.0), state, t, SETTINGS)
    assert state.replicas == 4
    threshold = queue_threshold(1.0, 4, SETTINGS)
    crossing = 305.0
    acted = None
    for t in range(int(crossing), int(crossing) + 20, 5):
        decision, state = decide("gpuplane", load(t, 8.0, queue=threshold + 10, ready=4), state, t, SETTINGS)
        if decision.action == UP:
            acted = t
            break
    assert acted is not None and acted - crossing <= 15
    assert decision.replicas >= 9 and "SLO at risk" in decision.reason


def test_gpuplane_scales_up_on_a_rising_rate_before_any_queue():
    state = ScalingState(replicas=4)
    decisions = []
    for t in range(0, 120, 5):
        decision, state = decide("gpuplane", load(t, 3.0 if t < 60 else 6.0, queue=0), state, t, SETTINGS)
        decisions.append(decision)
    ups = [d for d in decisions if d.action == UP]
    assert ups and ups[0].inputs["at"] <= 60 + 15


def test_gpuplane_keeps_300_s_before_scaling_down_and_never_while_the_slo_is_at_risk():
    state = ScalingState(replicas=10, last_up_at=0.0)
    decisions = []
    for t in range(5, 600, 5):
        decision, state = decide("gpuplane", load(t, 2.0), state, t, SETTINGS)
        decisions.append(decision)
        if decision.changes:
            break
    assert decision.action == DOWN and decision.inputs["at"] >= 300
    # SLO at risk (TTFT p95 over the objective): fewer replicas would do, but no scale-down
    at_risk = ScalingState(replicas=10, last_up_at=0.0)
    for t in range(5, 900, 5):
        decision, at_risk = decide("gpuplane", load(t, 2.0, ttft=5.0), at_risk, t, SETTINGS)
        assert decision.action != DOWN


def test_gpuplane_flapping_load_does_not_flap_replicas():
    state = ScalingState(replicas=6)
    changes = [(0.0, 6)]
    for t in range(0, 3600, 5):
        rps = 6.0 if (t // 20) % 2 == 0 else 2.0  # flips every 20 s
        decision, state = decide("gpuplane", load(t, rps), state, t, SETTINGS)
        if decision.changes:
            changes.append((t, decision.replicas))
    assert reversals(changes) <= 6  # at most one per 10 minutes
    assert len(changes) <= 4


def test_gpuplane_honours_min_and_max():
    settings = AutoscaleSettings(min_replicas=2, max_replicas=5)
    state = ScalingState(replicas=3)
    for t in range(0, 60, 5):
        decision, state = decide("gpuplane", load(t, 100.0, queue=500), state, t, settings)
    assert state.replicas == 5
    for t in range(60, 1500, 5):
        decision, state = decide("gpuplane", load(t, 0.0), state, t, settings)
    assert state.replicas == 2


def test_the_threshold_follows_the_measured_cold_start():
    assert cold_start_headroom(120.0, SETTINGS) > cold_start_headroom(30.0, SETTINGS)
    slow = ScalingState(replicas=10)
    fast = ScalingState(replicas=10)
    slow_decision, _ = decide("gpuplane", load(0, 9.3, cold=300.0), slow, 0, SETTINGS)
    fast_decision, _ = decide("gpuplane", load(0, 9.3, cold=10.0), fast, 0, SETTINGS)
    assert slow_decision.inputs["recommended"] > fast_decision.inputs["recommended"]


def test_static_never_changes():
    decision, _ = decide("static", Sample(at=0.0), ScalingState(replicas=3), 0.0, SETTINGS)
    assert decision.action == HOLD and decision.replicas == 3


# ---- where and which -------------------------------------------------------------------------

def test_targets_rank_by_cost_per_request_then_efficiency():
    ranked = rank_targets([
        Target("H100-SXM5-80GB", "exclusive", capacity_rps=16.0, usd_per_hour=6.5, tops_per_w=1.4),
        Target("L4", "exclusive", capacity_rps=0.93, usd_per_hour=0.8, tops_per_w=1.7),
        Target("A100-SXM4-40GB", "exclusive", capacity_rps=5.0, usd_per_hour=3.0, tops_per_w=0.8),
        Target("A100-SXM4-80GB", "exclusive", capacity_rps=5.0, usd_per_hour=4.0, available=False),
    ])
    assert [t.gpu_model for t in ranked] == ["H100-SXM5-80GB", "A100-SXM4-40GB", "L4"]


def test_the_victim_is_a_starting_replica_then_the_most_expensive_per_request():
    replicas = [ReplicaView("a", 0.8, 1.0, True, 0.0), ReplicaView("b", 3.0, 5.0, True, 10.0),
                ReplicaView("c", 0.8, 1.0, True, 20.0)]
    assert choose_victim(replicas).key == "c"  # 0.8 $/h per req/s over 0.6, and the newer of a and c
    assert choose_victim(replicas[1:] + [ReplicaView("d", 6.5, 16.0, False, 5.0)]).key == "d"
    assert choose_victim([]) is None


def test_settings_are_overridable_and_checked():
    settings = AutoscaleSettings.from_dict({"max_replicas": 8, "seed_up_window_s": 30})
    assert settings.max_replicas == 8 and settings.seed_up_window_s == 30.0
    assert AutoscaleSettings.from_dict({"min_replicas": 2}, settings).max_replicas == 8
    with pytest.raises(ValueError, match="unknown"):
        AutoscaleSettings.from_dict({"max_replica": 8})
    with pytest.raises(ValueError):
        AutoscaleSettings.from_dict({"min_replicas": 9, "max_replicas": 8})
    with pytest.raises(ValueError):
        AutoscaleSettings.from_dict({"ttft_slo_s": "nan"})


def test_reversals_count_direction_changes():
    assert reversals([(0, 2), (1, 4), (2, 6), (3, 4), (4, 6), (5, 6)]) == 2
