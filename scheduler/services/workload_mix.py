"""The observed workload mix: the packing plugins' typical pods and sharing plan, kept in the cache.

FragmentationGradient scores a placement by the capacity it strands for the workload's *typical
pods*, and SharingPlan steps weighted shares towards the GPU contents the workload's sharing
pods would fill if packed offline (``scheduler.core.packing_plan``). Both come from the observed
workload: every live placement (reserved, binding or running) plus the placements made in the
last ``WORKLOAD_MIX_WINDOW_S`` (released or not), each as (CPU, share per GPU, GPU count).

``refresh_workload_mix`` computes the mix and stores it in the shared cache; the beat task
``refresh_workload_mix_task`` runs it every ``WORKLOAD_MIX_INTERVAL_S``. The deploy path only
reads the cache (``current_workload_mix``: one cache read, no database statement), so a change
in the workload's mix reaches the next deploy within one interval. Below
``MIN_OBSERVED_PLACEMENTS`` placements there is no mix (the plugins keep their shipped defaults:
the classification's shares, no plan).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.choices import PlacementStatus
from scheduler.core.fragmentation_columns import observed_typical_pods
from scheduler.core.packing_plan import best_fit_decreasing
from scheduler.models import Placement

logger = logging.getLogger(__name__)

CACHE_KEY = "gpuplane:scheduler:workload-mix"
MIN_OBSERVED_PLACEMENTS = 20
_LIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


@dataclass(frozen=True)
class WorkloadMix:
    """Typical pods (FragmentationGradient's ``typical_pods``), the sharing plan's GPU contents
    (SharingPlan's ``patterns``), how many placements they came from, and when (``version``:
    the computation's timestamp in milliseconds, which keys the deploy path's profile cache)."""

    typical_pods: list[dict[str, Any]]
    patterns: list[list[int]]
    placements: int
    version: int

    def plugin_args(self) -> dict[str, dict[str, Any]]:
        """The packing plugins' arguments from this mix."""
        return {"FragmentationGradient": {"typical_pods": self.typical_pods},
                "SharingPlan": {"patterns": self.patterns}}

    def to_dict(self) -> dict[str, Any]:
        return {"typical_pods": self.typical_pods, "patterns": self.patterns, "placements": self.placements,
                "version": self.version}


def observe_workload_mix() -> WorkloadMix | None:
    """The mix of the live placements and of those made within the window; None below the minimum."""
    since = timezone.now() - timedelta(seconds=settings.WORKLOAD_MIX_WINDOW_S)
    placed = Placement.objects.filter(node__isnull=False).filter(Q(status__in=_LIVE) | Q(created_at__gte=since))
    shapes = [(cpu, share, len(gpus or ()), ()) for cpu, share, gpus in
              placed.values_list("cpu_milli", "share_milli", "gpu_indexes").iterator(chunk_size=2000)]
    typical = observed_typical_pods(shapes, minimum=MIN_OBSERVED_PLACEMENTS)
    if typical is None:
        return None
    shares = [share for _cpu, share, count, _models in shapes if count == 1 and 0 < share < SHARE_MILLI_FULL]
    patterns = sorted(list(pattern) for pattern in best_fit_decreasing(shares))
    return WorkloadMix(typical_pods=typical, patterns=patterns, placements=len(shapes),
                       version=int(timezone.now().timestamp() * 1000))


def refresh_workload_mix() -> WorkloadMix | None:
    """Observe the mix and store it for the deploy path (or clear it: too few placements)."""
    mix = observe_workload_mix()
    # Kept for three intervals: a beat that stops leaves the last mix in force a while, not forever.
    timeout = 3 * settings.WORKLOAD_MIX_INTERVAL_S
    if mix is None:
        cache.set(CACHE_KEY, None, timeout)
    else:
        cache.set(CACHE_KEY, mix.to_dict(), timeout)
        logger.info("workload mix: %d typical pods, %d planned GPU contents from %d placements",
                    len(mix.typical_pods), len(mix.patterns), mix.placements)
    return mix


def current_workload_mix() -> WorkloadMix | None:
    """The mix the last refresh stored (a cache read; None when there is none)."""
    stored = cache.get(CACHE_KEY)
    if not isinstance(stored, dict):
        return None
    try:
        return WorkloadMix(typical_pods=list(stored["typical_pods"]), patterns=list(stored["patterns"]),
                           placements=int(stored["placements"]), version=int(stored["version"]))
    except (KeyError, TypeError, ValueError):
        logger.warning("ignoring a malformed workload mix in the cache")
        return None
