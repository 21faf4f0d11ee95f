"""The savings calculator (scheduler.core.savings): seed 003's three examples, exactly, and the
baseline's rules, prices and integration over time."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from scheduler.core.savings import GPUCost, Holding, Occupant, Sample, compute_savings, integrate_samples


def _spread(n_occupants: int, gpus: int, share: Fraction, model: str = "A100-SXM4-80GB", per_gpu: int | None = None) -> list[Occupant]:
    """`n_occupants` single-GPU occupants of `share` each, filling GPU 0 first (`per_gpu` each),
    then GPU 1, ..."""
    per_gpu = per_gpu or -(-n_occupants // gpus)
    return [Occupant(f"pod-{i}", (Holding(f"gpu-{i // per_gpu}", model, share),)) for i in range(n_occupants)]


def test_it_computes_seed_003_mps_example_ten_inference_pods_on_two_gpus():
    # 10 pods at 1/5 GPU, 5 per GPU: baseline 10 whole GPUs, 2 used, (10-2)/10 = 80 %.
    savings = compute_savings(_spread(10, 2, Fraction(1, 5)), {})
    assert (savings.baseline_gpus, savings.gpus_used, savings.gpus_saved) == (10, 2, 8)
    assert savings.saved_percent == 80.0
    assert savings.allocated_gpu_equivalents == 2


def test_it_computes_seed_003_mig_example_twenty_batch_jobs_on_three_a100s():
    # 20 jobs on 1g instances (1/7 each), 7 + 7 + 6 on three A100s: (20-3)/20 = 85 %.
    savings = compute_savings(_spread(20, 3, Fraction(1, 7), per_gpu=7), {})
    assert (savings.baseline_gpus, savings.gpus_used, savings.gpus_saved) == (20, 3, 17)
    assert savings.saved_percent == 85.0
    assert savings.allocated_gpu_equivalents == Fraction(20, 7)


def test_it_computes_seed_003_time_slicing_example_sixteen_notebooks_on_four_gpus():
    # 16 notebooks on time-slice replicas (R = 4, 1/4 each), 4 per GPU: (16-4)/16 = 75 %.
    savings = compute_savings(_spread(16, 4, Fraction(1, 4)), {})
    assert (savings.baseline_gpus, savings.gpus_used, savings.gpus_saved) == (16, 4, 12)
    assert savings.saved_percent == 75.0


def test_a_replica_counts_one_whole_gpu_per_gpu_it_occupies():
    two_gpu_replica = Occupant("tp2", (Holding("g0", "H100-SXM5-80GB", Fraction(1)), Holding("g1", "H100-SXM5-80GB", Fraction(1))))
    # One pod with two 1g MIG instances on the same GPU: 2/7 of one GPU -> ceil = 1 GPU.
    two_slices_one_gpu = Occupant("mig2", (Holding("g2", "H100-SXM5-80GB", Fraction(1, 7)),) * 2)
    savings = compute_savings([two_gpu_replica, two_slices_one_gpu], {})
    assert (savings.baseline_gpus, savings.gpus_used, savings.gpus_saved) == (3, 3, 0)
    assert savings.saved_percent == 0.0


def test_savings_are_priced_and_powered_per_gpu_model():
    occupants = _spread(4, 1, Fraction(1, 4), model="A100-SXM4-80GB") + [
        Occupant(f"l4-{i}", (Holding("l4-gpu", "L4", Fraction(1, 2)),)) for i in range(2)
    ]
    costs = {"A100-SXM4-80GB": GPUCost(usd_per_hour=4.0, power_w=400), "L4": GPUCost(usd_per_hour=0.8, power_w=72)}
    savings = compute_savings(occupants, costs)
    by_model = {m.gpu_model: m for m in savings.by_model}
    # A100: 4 baseline - 1 used = 3 saved -> 3 * 4.0 = 12 $/h, 3 * 400 W = 1.2 kWh/h.
    assert (by_model["A100-SXM4-80GB"].gpus_saved, by_model["A100-SXM4-80GB"].usd_per_hour) == (3, 12.0)
    assert by_model["A100-SXM4-80GB"].kwh_per_hour == pytest.approx(1.2)
    # L4: 2 - 1 = 1 saved -> 0.8 $/h and 0.072 kWh/h.
    assert by_model["L4"].gpus_saved == 1
    assert savings.usd_per_hour == pytest.approx(12.8)
    assert savings.kwh_per_hour == pytest.approx(1.272)


def test_a_model_without_a_price_is_counted_but_costs_nothing():
    savings = compute_savings(_spread(3, 1, Fraction(1, 3), model=""), {})
    assert savings.gpus_saved == 2
    assert (savings.usd_per_hour, savings.kwh_per_hour) == (0.0, 0.0)


def test_an_empty_cluster_saves_nothing():
    savings = compute_savings([], {})
    assert (savings.baseline_gpus, savings.gpus_used, savings.saved_percent, savings.by_model) == (0, 0, 0.0, ())


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _sample(minutes: float, gpus: float, usd: float = 0.0, kwh: float = 0.0) -> Sample:
    return Sample(T0 + timedelta(minutes=minutes), gpus, usd, kwh)


def test_samples_integrate_as_a_step_function():
    # 8 GPUs saved for 30 min, then 4 for 30 min: 8 * 0.5 + 4 * 0.5 = 6 GPU-hours.
    samples = [_sample(30, 4, usd=2, kwh=1), _sample(0, 8, usd=4, kwh=2)]
    total = integrate_samples(samples, T0, T0 + timedelta(hours=1), max_hold_s=3600)
    assert total.gpu_hours == pytest.approx(6.0)
    assert total.usd == pytest.approx(3.0)  # 4 * 0.5 + 2 * 0.5
    assert total.kwh == pytest.approx(1.5)


def test_a_gap_in_the_samples_counts_only_the_hold():
    # The sampler stopped after the first sample: it holds 10 minutes, not the whole hour.
    total = integrate_samples([_sample(0, 6)], T0, T0 + timedelta(hours=1), max_hold_s=600)
    assert total.gpu_hours == pytest.approx(1.0)  # 6 * 10/60


def test_a_sample_before_the_window_counts_only_inside_it():
    # Held from -10 to +10 minutes (hold 20 min); the window starts at 0: 10 minutes count.
    total = integrate_samples([_sample(-10, 6)], T0, T0 + timedelta(hours=1), max_hold_s=1200)
    assert total.gpu_hours == pytest.approx(1.0)
