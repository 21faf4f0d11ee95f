"""Feedback (issue 22, must-show 5): correction factors per (model, GPU model, sharing mode) and
bounded weight updates of the balanced profile; the pure rule."""
from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.feedback import (
    MAX_FACTOR,
    MIN_FACTOR,
    FeedbackSettings,
    adjust_weights,
    shortfall,
    update_correction,
    within_bands,
)
from scheduler.core.plugins.power_efficiency import PowerEfficiency
from scheduler.core.profiles import BALANCED
from scheduler.core.snapshot import ClusterSnapshot
from tests.examples import examples
from tests.scheduler.core.builders import A100, H100, make_node, request, scores

SEED_PLUGINS = FeedbackSettings().plugins
DEFAULTS = {name: BALANCED["scores"][name] for name in SEED_PLUGINS}


def test_correction_factor_converges_to_measured_over_predicted_and_ignores_junk():
    factor = None
    for _ in range(40):
        factor = update_correction(factor, predicted=100.0, measured=60.0, alpha=0.2)
    assert abs(factor - 0.6) < 1e-6
    assert update_correction(0.6, predicted=0.0, measured=50.0, alpha=0.2) == 0.6
    assert update_correction(0.6, predicted=100.0, measured=math.nan, alpha=0.2) == 0.6
    assert update_correction(None, predicted=1.0, measured=1e9, alpha=0.2) == MAX_FACTOR
    assert update_correction(None, predicted=1.0, measured=0.0, alpha=0.2) == MIN_FACTOR


def test_an_under_delivering_gpu_model_loses_weight_over_time():
    """H100s deliver half their catalog throughput: their correction factor falls, PowerEfficiency
    (which favoured them) loses weight step by step, and the corrected efficiency score ranks the
    A100 first."""
    config = FeedbackSettings()
    factors: dict[str, float] = {}
    weights = dict(DEFAULTS)
    history = [weights["PowerEfficiency"]]
    preference = {H100: 1412.0, A100: 780.0}  # what PowerEfficiency scores (milli-TFLOPS per W)
    for _ in range(30):
        factors[H100] = update_correction(factors.get(H100), predicted=100.0, measured=50.0, alpha=config.alpha)
        factors[A100] = update_correction(factors.get(A100), predicted=100.0, measured=100.0, alpha=config.alpha)
        errors = {"PowerEfficiency": shortfall(factors, preference)}
        errors.update({name: 0.0 for name in SEED_PLUGINS if name != "PowerEfficiency"})
        weights = adjust_weights(weights, DEFAULTS, errors, config)
        history.append(weights["PowerEfficiency"])
    assert all(b <= a + 1e-12 for a, b in zip(history, history[1:]))
    assert history[-1] < DEFAULTS["PowerEfficiency"]
    assert history[-1] >= DEFAULTS["PowerEfficiency"] * (1 - config.band) - 1e-12
    assert math.isclose(sum(weights.values()), sum(DEFAULTS.values()))
    snapshot = ClusterSnapshot([make_node("h100", H100), make_node("a100", A100)])
    before = scores(PowerEfficiency(), snapshot, request(8))
    after = scores(PowerEfficiency(corrections=factors), snapshot, request(8))
    assert before["h100"][1] > before["a100"][1]
    assert after["a100"][1] > after["h100"][1]


def test_no_error_no_change():
    assert adjust_weights(DEFAULTS, DEFAULTS, {}, FeedbackSettings()) == DEFAULTS or all(
        math.isclose(a, DEFAULTS[n]) for n, a in adjust_weights(DEFAULTS, DEFAULTS, {}, FeedbackSettings()).items())


weights_strategy = st.fixed_dictionaries({name: st.floats(0, 5, allow_nan=False) for name in SEED_PLUGINS})
errors_strategy = st.dictionaries(st.sampled_from(SEED_PLUGINS),
                                  st.one_of(st.floats(-2, 3, allow_nan=False), st.just(math.nan), st.just(math.inf)))


@settings(max_examples=examples(300), deadline=None)
@given(start=weights_strategy, rounds=st.lists(errors_strategy, min_size=1, max_size=8),
       band=st.floats(0.0, 0.9), rate=st.floats(0.0, 5.0))
def test_weights_never_leave_their_bands_and_keep_their_sum(start, rounds, band, rate):
    config = FeedbackSettings(band=band, rate=rate)
    weights = start
    for errors in rounds:
        weights = adjust_weights(weights, DEFAULTS, errors, config)
        assert within_bands(weights, DEFAULTS, band)
        assert math.isclose(sum(weights.values()), sum(DEFAULTS.values()), rel_tol=1e-9, abs_tol=1e-9)
