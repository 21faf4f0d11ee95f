"""Feedback, persisted: correction factors and the balanced profile's learned weights.

The rules are pure (``scheduler.core.feedback``); this module keeps their results and audits
every change:

- ``observe``: a replica's measured throughput against its prediction updates the correction
  factor of (model, GPU model, sharing mode); then, unless learning is frozen or disabled
  (``FEEDBACK_ENABLED``), one bounded weight update: PowerEfficiency's error is the shortfall of
  the GPU models it favours (their correction factors below 1, weighted by their catalog
  efficiency), the other plugins count as average. A change of the weights is one audit event
  (``weights.learned``, before and after).
- ``freeze`` / ``reset``: stop learning (or resume), restore the defaults (weights and factors);
  each an audit event.
- ``learned``: the weights and per-GPU-model corrections the placement engine uses (a cache read;
  the database on a miss), with a version that keys ``deciding``'s scheduler cache.
"""
from __future__ import annotations

import math
import time
from statistics import fmean
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from lifecycle.audit import record
from nodes.catalog import CATALOG
from scheduler.core.feedback import FeedbackSettings, adjust_weights, shortfall, update_correction
from scheduler.core.profiles import PROFILES
from scheduler.models import CorrectionFactor, LearnedWeights

PROFILE = "balanced"
CACHE_KEY = "gpuplane:feedback:learned"
CHANGE_EPSILON = 1e-6


def feedback_settings() -> FeedbackSettings:
    values = dict(getattr(settings, "FEEDBACK", {}) or {})
    known = {k: float(v) for k, v in values.items() if k in ("alpha", "band", "rate")}
    return FeedbackSettings(**known)  # type: ignore[arg-type]


def defaults(profile: str = PROFILE) -> dict[str, float]:
    scores = PROFILES[profile]["scores"]
    return {name: float(scores[name]) for name in feedback_settings().plugins if name in scores}


def _row(profile: str = PROFILE, *, lock: bool = False) -> LearnedWeights:
    manager = LearnedWeights.objects.select_for_update() if lock else LearnedWeights.objects
    row, _ = manager.get_or_create(profile=profile, defaults={"weights": defaults(profile)})
    return row


def _publish() -> dict[str, Any]:
    row = LearnedWeights.objects.filter(profile=PROFILE).first()
    factors: dict[str, list[float]] = {}
    for gpu_model, factor in CorrectionFactor.objects.values_list("gpu_model", "factor"):
        factors.setdefault(gpu_model, []).append(factor)
    data = {"weights": dict(row.weights) if row is not None else {},
            "corrections": {model: fmean(values) for model, values in factors.items()},
            "version": time.time_ns()}
    cache.set(CACHE_KEY, data, timeout=None)
    return data


def learned() -> dict[str, Any]:
    """{"weights": learned weights of the balanced profile ({} = defaults), "corrections": GPU model
    -> mean correction factor, "version": changes when either does}."""
    data = cache.get(CACHE_KEY)
    return data if isinstance(data, dict) else _publish()


def observe(model: str, gpu_model: str, sharing_mode: str, predicted: float, measured: float, *,
            actor: Any = "feedback") -> dict[str, float] | None:
    """Record one prediction against its measurement; returns the new weights when they changed."""
    config = feedback_settings()
    if not (math.isfinite(predicted) and math.isfinite(measured)) or predicted <= 0 or measured < 0:
        return None
    changed: dict[str, float] | None = None
    with transaction.atomic():
        row = CorrectionFactor.objects.select_for_update().filter(
            model=model, gpu_model=gpu_model, sharing_mode=sharing_mode).first()
        factor = update_correction(row.factor if row is not None else None, predicted, measured, config.alpha)
        if factor is None:
            return None
        if row is None:
            CorrectionFactor.objects.create(model=model, gpu_model=gpu_model, sharing_mode=sharing_mode,
                                            factor=factor, observations=1)
        else:
            row.factor = factor
            row.observations += 1
            row.save(update_fields=["factor", "observations", "updated_at"])
        weights = _row(lock=True)
        if getattr(settings, "FEEDBACK_ENABLED", True) and not weights.frozen:
            changed = _learn(weights, config, actor)
    _publish()
    return changed


def _learn(row: LearnedWeights, config: FeedbackSettings, actor: Any) -> dict[str, float] | None:
    base = defaults()
    per_model: dict[str, list[float]] = {}
    for gpu_model, factor in CorrectionFactor.objects.values_list("gpu_model", "factor"):
        per_model.setdefault(gpu_model, []).append(factor)
    factors = {m: fmean(v) for m, v in per_model.items()}
    preference = {m: CATALOG[m].tflops_per_watt for m in factors if m in CATALOG}
    errors = dict.fromkeys(base, 0.0)
    errors["PowerEfficiency"] = shortfall(factors, preference)
    if not any(errors.values()):
        return None
    current = {name: float(row.weights.get(name, w)) for name, w in base.items()}
    new = adjust_weights(current, base, errors, config)
    if all(abs(new[n] - current[n]) <= CHANGE_EPSILON for n in base):
        return None
    row.weights = new
    row.save(update_fields=["weights", "updated_at"])
    record("weights.learned", row, actor=actor,
           reason=f"PowerEfficiency's favoured GPUs deliver {100 * (1 - errors['PowerEfficiency']):.0f} % of their catalog "
                  "throughput (correction factors)",
           before={n: round(current[n], 6) for n in base}, after={n: round(new[n], 6) for n in base})
    return new


def freeze(frozen: bool, *, user: Any) -> LearnedWeights:
    with transaction.atomic():
        row = _row(lock=True)
        if row.frozen != frozen:
            row.frozen = frozen
            row.save(update_fields=["frozen", "updated_at"])
            record("weights.frozen" if frozen else "weights.unfrozen", row, actor=user,
                   reason="learning stopped" if frozen else "learning resumed",
                   before={"frozen": not frozen}, after={"frozen": frozen})
    _publish()
    return row


def reset(*, user: Any) -> LearnedWeights:
    """The defaults again: weights and correction factors (learning keeps its frozen switch)."""
    with transaction.atomic():
        row = _row(lock=True)
        before = dict(row.weights)
        row.weights = defaults()
        row.save(update_fields=["weights", "updated_at"])
        cleared, _ = CorrectionFactor.objects.all().delete()
        record("weights.reset", row, actor=user, reason=f"defaults restored; {cleared} correction factors cleared",
               before=before, after=dict(row.weights))
    _publish()
    return row


def apply_learned(data: dict[str, Any], profile_name: str) -> None:
    """Put the learned weights and corrections into a profile dict (the balanced profile only)."""
    if profile_name != PROFILE:
        return
    state = learned()
    scores = dict(data.get("scores") or {})
    for name, weight in (state.get("weights") or {}).items():
        if name in scores:
            scores[name] = float(weight)
    data["scores"] = scores
    corrections = state.get("corrections") or {}
    if corrections and "PowerEfficiency" in scores:
        args = {k: dict(v) for k, v in dict(data.get("plugin_args") or {}).items()}
        args["PowerEfficiency"] = {**args.get("PowerEfficiency", {}), "corrections": dict(corrections)}
        data["plugin_args"] = args
