"""Scheduling profiles as data: which plugins run and with what weights.

A profile is a plain dict, so it can live in Django settings (``GPUPLANE_SCHEDULER_PROFILES``,
read by the services) and be edited without touching plugin code. ``build_profile`` validates a
dict and instantiates its plugins; ``PROFILES`` holds the two built-in ones.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from scheduler.core.classify import ClassificationSettings
from scheduler.core.cycle import Scheduler
from scheduler.core.framework import (
    FallbackSettings,
    FilterPlugin,
    Plugin,
    PreFilterPlugin,
    PreScorePlugin,
    Profile,
    ReservePlugin,
    ScorePlugin,
)
from scheduler.core.plugins import REGISTRY
from scheduler.core.plugins.fragmentation_gradient import DEFAULT_TYPICAL_PODS

# Cheap, most selective filters first: later filters only see the nodes still in the running.
DEFAULT_FILTERS: tuple[str, ...] = (
    "NodeSchedulable",
    "NodeResourcesFit",
    "CapabilityMatch",
    "SharingModeCompat",
    "GangFit",
    "GPUMemoryFit",
    "UtilizationLimit",
    "NamespaceQuota",
)

BALANCED: dict[str, Any] = {
    "name": "balanced",
    "filters": list(DEFAULT_FILTERS),
    "scores": {
        # The seed's weights (docs/design.md section 3), in the same proportions.
        "PowerEfficiency": 0.30,
        "WorkloadAffinity": 0.25,
        "LeastUtilized": 0.20,
        "PriorityPower": 0.15,
        "PartitionCompat": 0.10,
        # The packing rule (not in the seed): without it the seed's weights spread work
        # (LeastUtilized) and strand GPU capacity, BestFit's level on the Alibaba trace. With it
        # the default beats FGD on every list of the trace (BENCHMARKS.md, "Trace replay").
        # SharingPlan outweighs all the others together, so on-plan GPUs rank first whenever a
        # node has one; FragmentationGradient outweighs the seed's plugins together.
        "FragmentationGradient": 3.0,
        "SharingPlan": 4.5,
    },
    "reserve": ["CapacityReserve"],
    "plugin_args": {"UtilizationLimit": {"max_pct": 90}},
    "top_k": 50,
    "rejected_examples_per_reason": 3,
    "fallback": {"idle_utilization_pct": 30, "idle_memory_pct": 50},
    "classification": {},
}

PACKING: dict[str, Any] = {
    **copy.deepcopy(BALANCED),
    "name": "packing",
    # Dense clusters: gpuplane's packing rule alone (docs/design.md section 6), with a say for the
    # unit's fit (a 500 MPS slot for 250 wastes half of it). SharingPlan outweighs the others.
    "scores": {
        "SharingPlan": 0.55,
        "FragmentationGradient": 0.35,
        "PartitionCompat": 0.10,
    },
    "plugin_args": {
        "UtilizationLimit": {"max_pct": 90},
        "FragmentationGradient": {"typical_pods": [dict(p) for p in DEFAULT_TYPICAL_PODS]},
    },
}

PROFILES: dict[str, dict[str, Any]] = {"balanced": BALANCED, "packing": PACKING}

_KNOWN_KEYS = frozenset(
    {"name", "filters", "scores", "reserve", "plugin_args", "top_k", "rejected_examples_per_reason",
     "fallback", "classification"}
)


class ProfileError(ValueError):
    """A profile dict that names an unknown plugin, a plugin at the wrong point, or a bad value."""


def _plugin_class(name: str, base: type[Plugin], point: str) -> type[Plugin]:
    cls = REGISTRY.get(name)
    if cls is None:
        raise ProfileError(f"unknown plugin {name!r} in {point} (known: {', '.join(sorted(REGISTRY))})")
    if not issubclass(cls, base):
        raise ProfileError(f"plugin {name!r} cannot be used as a {point} plugin")
    return cls


def build_profile(data: Mapping[str, Any]) -> Profile:
    """Validate a profile dict and instantiate its plugins (one instance per plugin name).

    Raises ``ProfileError`` for unknown keys or plugins, a plugin at an extension point it does
    not implement, a negative or non-finite weight, arguments for a plugin that is not enabled,
    or a ``top_k`` below 1.
    """
    unknown = set(data) - _KNOWN_KEYS
    if unknown:
        raise ProfileError(f"unknown profile keys: {', '.join(sorted(unknown))}")
    name = str(data.get("name", "custom"))
    args: Mapping[str, Mapping[str, Any]] = data.get("plugin_args", {}) or {}
    instances: dict[str, Plugin] = {}

    def instance(plugin_name: str, base: type[Plugin], point: str) -> Plugin:
        cls = _plugin_class(plugin_name, base, point)
        if plugin_name not in instances:
            try:
                instances[plugin_name] = cls(**dict(args.get(plugin_name, {})))
            except TypeError as error:
                raise ProfileError(f"bad arguments for {plugin_name}: {error}") from None
        return instances[plugin_name]

    filters = tuple(instance(n, FilterPlugin, "filter") for n in data.get("filters", DEFAULT_FILTERS))
    scores = []
    for plugin_name, weight in dict(data.get("scores", {})).items():
        weight = float(weight)
        if not math.isfinite(weight) or weight < 0:
            raise ProfileError(f"weight of {plugin_name} must be a finite number >= 0, got {weight}")
        scores.append((instance(plugin_name, ScorePlugin, "score"), weight))
    reserves = tuple(instance(n, ReservePlugin, "reserve") for n in data.get("reserve", ("CapacityReserve",)))
    stray = set(args) - set(instances)
    if stray:
        raise ProfileError(f"plugin_args for plugins that are not enabled: {', '.join(sorted(stray))}")
    # PreFilter (PreScore) runs for every enabled plugin that implements it, in the order first enabled.
    pre_filters = tuple(p for p in instances.values() if isinstance(p, PreFilterPlugin))
    pre_scores = tuple(p for p in instances.values() if isinstance(p, PreScorePlugin))
    top_k = int(data.get("top_k", 50))
    examples = int(data.get("rejected_examples_per_reason", 3))
    if top_k < 1 or examples < 0:
        raise ProfileError("top_k must be >= 1 and rejected_examples_per_reason >= 0")
    fallback = dict(data.get("fallback", {}) or {})
    return Profile(
        name=name,
        filters=filters,  # type: ignore[arg-type]
        scores=tuple(scores),  # type: ignore[arg-type]
        reserves=reserves,  # type: ignore[arg-type]
        pre_filters=pre_filters,
        pre_scores=pre_scores,
        top_k=top_k,
        rejected_examples_per_reason=examples,
        fallback=FallbackSettings(
            idle_utilization_pct=float(fallback.get("idle_utilization_pct", 30)),
            idle_memory_pct=float(fallback.get("idle_memory_pct", 50)),
        ),
        classification=ClassificationSettings.from_dict(dict(data.get("classification", {}) or {})),
    )


def get_profile(name: str = "balanced", profiles: Mapping[str, Mapping[str, Any]] | None = None) -> Profile:
    """The profile called ``name`` from ``profiles`` (settings data) or the built-in ones."""
    source = PROFILES if profiles is None else profiles
    if name not in source:
        raise ProfileError(f"unknown profile {name!r} (known: {', '.join(sorted(source))})")
    return build_profile({"name": name, **source[name]})


def scheduler_for(name: str = "balanced", profiles: Mapping[str, Mapping[str, Any]] | None = None) -> Scheduler:
    """A ``Scheduler`` running the named profile."""
    return Scheduler(get_profile(name, profiles))
