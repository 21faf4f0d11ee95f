"""Feedback: what placements predicted against what replicas deliver (docs/concepts.md "Feedback").

Pure Python. Two rules:

- ``update_correction``: per (model, GPU model, sharing mode), the correction factor is an
  exponentially weighted mean of measured / predicted throughput (``alpha`` per observation),
  kept within [``MIN_FACTOR``, ``MAX_FACTOR``] so one absurd sample cannot wreck it. Predictions
  are multiplied by it (the autoscaler's replica capacity, PowerEfficiency's catalog figure).
- ``adjust_weights``: a bounded online update of a profile's score weights. Each plugin gets an
  error in [0, 1] (how wrong its preference proved: for PowerEfficiency, how far the GPUs it
  favoured fell short of their catalog throughput); a weight moves by ``rate`` x (mean error -
  its error) x its default, then all are projected back into their bands (default x (1 -+
  ``band``)) with their sum unchanged. The projection is exact: the result always lies in the
  bands and sums to the defaults' sum.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

MIN_FACTOR = 0.1
MAX_FACTOR = 2.0


@dataclass(frozen=True)
class FeedbackSettings:
    """``alpha``: weight of a new observation in the correction factor (0-1); ``band``: how far a
    weight may leave its default, as a fraction of it; ``rate``: step of the weight update per
    unit of error difference; ``plugins``: the weights that learn."""

    alpha: float = 0.2
    band: float = 0.5
    rate: float = 0.1
    plugins: tuple[str, ...] = ("PowerEfficiency", "WorkloadAffinity", "LeastUtilized", "PriorityPower",
                                "PartitionCompat")


def update_correction(previous: float | None, predicted: float, measured: float, alpha: float) -> float | None:
    """The new correction factor, or ``previous`` unchanged (None if none yet) when the pair
    cannot be trusted (non-finite, or a prediction that is not positive)."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or predicted <= 0 or measured < 0:
        return previous
    ratio = min(MAX_FACTOR, max(MIN_FACTOR, measured / predicted))
    if previous is None:
        return ratio
    return min(MAX_FACTOR, max(MIN_FACTOR, previous + alpha * (ratio - previous)))


def shortfall(factors: Mapping[str, float], preference: Mapping[str, float]) -> float:
    """How wrong a plugin's preference proved: the preference-weighted shortfall of the GPU models'
    correction factors below 1 (0 = every favoured model delivers what was promised)."""
    total = sum(max(0.0, w) for w in preference.values())
    if total <= 0:
        return 0.0
    return sum(max(0.0, w) * max(0.0, 1.0 - factors.get(model, 1.0)) for model, w in preference.items()) / total


def bands(defaults: Mapping[str, float], band: float) -> dict[str, tuple[float, float]]:
    return {name: (w * (1 - band), w * (1 + band)) for name, w in defaults.items()}


def project(weights: Mapping[str, float], defaults: Mapping[str, float], band: float) -> dict[str, float]:
    """The weights moved by one common shift, each clamped to its band, summing to the defaults'
    sum. The clamped sum is piecewise linear in the shift, so the shift is solved exactly between
    the two breakpoints that bracket the target."""
    limits = bands(defaults, band)
    names = list(defaults)
    target = sum(defaults.values())
    start = {n: weights.get(n, defaults[n]) for n in names}

    def clamped(shift: float) -> dict[str, float]:
        return {n: min(limits[n][1], max(limits[n][0], start[n] + shift)) for n in names}

    points = sorted({limits[n][0] - start[n] for n in names} | {limits[n][1] - start[n] for n in names})
    below, above = points[0], points[-1]
    for point in points:
        if sum(clamped(point).values()) < target:
            below = point
        else:
            above = point
            break
    low_sum, high_sum = sum(clamped(below).values()), sum(clamped(above).values())
    shift = above if high_sum == low_sum else below + (target - low_sum) * (above - below) / (high_sum - low_sum)
    result = clamped(shift)
    # The last rounding error goes to weights with room, so every weight stays in its band.
    error = target - sum(result.values())
    for name in names:
        if not error:
            break
        room = limits[name][1] - result[name] if error > 0 else result[name] - limits[name][0]
        step = max(-room, min(room, error))
        result[name] += step
        error -= step
    return result


def adjust_weights(weights: Mapping[str, float], defaults: Mapping[str, float], errors: Mapping[str, float],
                   settings: FeedbackSettings) -> dict[str, float]:
    """One bounded update of the learning weights (names of ``defaults``); plugins without an
    error count as average (they neither gain nor lose by themselves)."""
    names = list(defaults)
    clean = {n: min(1.0, max(0.0, errors[n])) for n in names if n in errors and math.isfinite(errors[n])}
    mean = sum(clean.values()) / len(clean) if clean else 0.0
    moved = {n: weights.get(n, defaults[n]) + settings.rate * (mean - clean.get(n, mean)) * defaults[n]
             for n in names}
    return project(moved, defaults, settings.band)


def within_bands(weights: Mapping[str, float], defaults: Mapping[str, float], band: float, tolerance: float = 1e-9) -> bool:
    limits = bands(defaults, band)
    return all(limits[n][0] - tolerance <= weights[n] <= limits[n][1] + tolerance for n in defaults)
