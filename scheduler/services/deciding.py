"""Deciding: every replica of a request through the placement core, on a snapshot of the inventory.

Default scheduler (seed 004)
----------------------------
``enable_gpu_selection=False`` skips selection: every replica goes to the default Kubernetes
scheduler (decision outcome "skipped"). Otherwise, when no node qualifies and the request
allows it, a replica is handed to the default scheduler only if some node was turned away by
telemetry alone (utilization over the limit) - Kubernetes may still run it there; when every
node lacks capacity, handing over could only leave a pod Pending, so the answer is 409.
Handed-over replicas reserve nothing: inventory sync counts their pods once they bind.
A namespace with a quota is never handed over (see ``capacity``).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.adapters import InventorySnapshot, PartitionClaim, partition_claims
from scheduler.choices import DecisionOutcome
from scheduler.core import (
    Outcome,
    PlacementRequest,
    Priority,
    ProfileError,
    QuotaUsage,
    Scheduler,
    ScheduleResult,
    SharingRequest,
    WorkloadType,
    build_profile,
)
from scheduler.core.advice import charge, explain_unplaced
from scheduler.core.profiles import PROFILES
from scheduler.core.wording import nodes_that
from scheduler.services.errors import NoCapacity
from scheduler.services.feedback import PROFILE as FEEDBACK_PROFILE
from scheduler.services.feedback import apply_learned, learned
from scheduler.services.spec import DeploySpec
from scheduler.services.workload_mix import WorkloadMix, current_workload_mix

# Filters whose rejection reflects telemetry, not capacity: the default scheduler may still run
# the workload where they said no (see "Default scheduler" above).
TELEMETRY_FILTERS = frozenset({"UtilizationLimit"})


def placement_scheduler() -> Scheduler:
    """A ``Scheduler`` for the configured profile, with the settings' top-K, idle thresholds and
    classification applied, and the observed workload mix (``workload_mix``: a cache read, no
    database statement) given to its packing plugins unless the profile states their arguments.
    Raises ``ImproperlyConfigured`` for an unknown or invalid profile."""
    name = settings.GPUPLANE_SCHEDULER_PROFILE
    mix = current_workload_mix()
    # Building the profile costs more than a decision: keep one Scheduler (stateless between
    # cycles) per configuration and mix. The settings are fixed in a process; the mix changes
    # once per refresh, so its version stands for it in the key.
    key = (name, id(getattr(settings, "SCHEDULER_PROFILES", None)), settings.DECISION_MATRIX_TOP_K,
           settings.IDLE_UTILIZATION_PCT, settings.IDLE_MEMORY_PCT,
           json.dumps(getattr(settings, "SCHEDULER_CLASSIFICATION", {}), sort_keys=True),
           None if mix is None else mix.version, _learned_version(name))
    scheduler = _SCHEDULERS.get(key)
    if scheduler is None:
        scheduler = _build_scheduler(name, mix)
        if len(_SCHEDULERS) >= 32:
            _SCHEDULERS.clear()
        _SCHEDULERS[key] = scheduler
    return scheduler


def _build_scheduler(name: str, mix: WorkloadMix | None) -> Scheduler:
    profiles = {**PROFILES, **getattr(settings, "SCHEDULER_PROFILES", {})}
    if name not in profiles:
        raise ImproperlyConfigured(f"GPUPLANE_SCHEDULER_PROFILE {name!r} is not a profile ({', '.join(sorted(profiles))})")
    data = dict(profiles[name])
    data["name"] = name
    data["top_k"] = settings.DECISION_MATRIX_TOP_K
    data["fallback"] = {
        **dict(data.get("fallback") or {}),
        "idle_utilization_pct": settings.IDLE_UTILIZATION_PCT,
        "idle_memory_pct": settings.IDLE_MEMORY_PCT,
    }
    data["classification"] = {**dict(data.get("classification") or {}),
                              **getattr(settings, "SCHEDULER_CLASSIFICATION", {})}
    if mix is not None:
        _observed_workload(data, mix)
    apply_learned(data, name)  # the feedback's learned weights and correction factors
    try:
        return Scheduler(build_profile(data))
    except (ProfileError, ValueError, KeyError) as error:
        raise ImproperlyConfigured(f"scheduling profile {name!r}: {error}") from error


_SCHEDULERS: dict[tuple[Any, ...], Scheduler] = {}


def _learned_version(name: str) -> int | None:
    return learned().get("version") if name == FEEDBACK_PROFILE else None


def _observed_workload(data: dict[str, Any], mix: WorkloadMix) -> None:
    """Give the profile's packing plugins the observed mix, where the profile does not state
    their arguments itself."""
    scores = dict(data.get("scores") or {})
    args = {name: dict(value) for name, value in dict(data.get("plugin_args") or {}).items()}
    for plugin, values in mix.plugin_args().items():
        if plugin in scores and not set(values) & set(args.get(plugin, {})):
            args[plugin] = {**args.get(plugin, {}), **values}
    data["plugin_args"] = args


@dataclass
class ReplicaPlan:
    """One replica's decision: its outcome, the stored matrix and (when placed) its claims."""

    replica_index: int
    outcome: str
    decision: ScheduleResult
    message: str
    duration_ms: float
    claims: list[PartitionClaim] = field(default_factory=list)
    # What the services say over the core's own outcome and message (a hand-over).
    overrides: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def matrix(self) -> dict[str, Any]:
        """The stored matrix: the core's ``to_dict()`` plus ``plugins``, the score plugins in
        profile order (a stored ``weights`` object loses its key order on PostgreSQL). Built
        when first read, which for a placed replica is after the placement lock is released."""
        matrix = self.decision.to_dict()
        matrix["plugins"] = list(self.decision.weights)
        matrix.update(self.overrides)
        return matrix


def placement_request(spec: DeploySpec, replica_index: int, quota: QuotaUsage | None) -> PlacementRequest:
    return PlacementRequest(
        key=f"{spec.namespace}/{spec.name}#{replica_index}",
        memory_mib=spec.memory_mib,
        gpu_count=spec.gpu_count,
        priority=Priority(spec.priority),
        latency_slo_ms=spec.latency_slo_ms,
        workload_type=WorkloadType(spec.workload_type),
        namespace=spec.namespace,
        sharing=SharingRequest(spec.sharing),
        share_milli=None if spec.share_percent is None else spec.share_percent * SHARE_MILLI_FULL // 100,
        enable_gpu_selection=spec.enable_gpu_selection,
        # The fallback is the services' call (see the module docstring), not the core's.
        allow_default_scheduler=False,
        quota=quota,
        cpu_milli=spec.cpu_milli,
        host_memory_mib=spec.host_memory_mib,
    )


def _telemetry_rejections(decision: ScheduleResult, scheduler: Scheduler) -> int:
    """Nodes turned away by telemetry alone (they passed every capacity filter before it)."""
    reasons = {reason for plugin in scheduler.profile.filters if plugin.NAME in TELEMETRY_FILTERS
               for reason in plugin.reasons}
    return sum(count for reason, count in decision.diagnosis.rejected.items() if reason in reasons)


def decide(spec: DeploySpec, inventory: InventorySnapshot, scheduler: Scheduler, *,
           quota: QuotaUsage | None = None, replica_indexes: Iterable[int] | None = None) -> list[ReplicaPlan]:
    """Decide each replica on ``inventory`` (each sees the ones before it); raise ``NoCapacity``.

    ``replica_indexes`` are the replicas to decide, all of the spec's (0 .. replicas-1) by default.

    ``quota`` is the namespace's quota and use (``adapters.namespace_quota``), None for none;
    each replica is checked against it with the replicas before it counted as used. A namespace
    with a quota is never handed to the default scheduler, neither for busy nodes nor with
    selection disabled (``NoCapacity``): what that scheduler gives is not charged to the quota
    (see "Namespace quotas"). Each plan's ``matrix`` is built when first read (``ReplicaPlan``).

    A replica that finds no node is explained by ``core.advice.explain_unplaced``: the earlier
    replicas' tentative reservations are released from ``inventory`` (it is not to be used
    afterwards), the replica is judged against the cluster without them, and the ``NoCapacity``
    leads with the dominant reason and a suggestion checked to work (its ``explanation``).
    """
    plans: list[ReplicaPlan] = []
    indexes = list(range(spec.replicas) if replica_indexes is None else replica_indexes)
    quota_before = quota
    for position, replica_index in enumerate(indexes):
        started = time.perf_counter()
        request = placement_request(spec, replica_index, quota)
        decision = scheduler.schedule(request, inventory.snapshot)
        elapsed = time.perf_counter() - started
        message = decision.message
        if decision.outcome == Outcome.PLACED:
            assert decision.assignment is not None
            plan = ReplicaPlan(replica_index, DecisionOutcome.PLACED, decision, message, elapsed * 1000,
                               claims=partition_claims(decision.assignment, inventory.index))
            quota = charge(quota, decision.assignment, spec.memory_mib)  # the next replica sees it as used
        elif decision.outcome == Outcome.DEFAULT_SCHEDULER:  # only when selection is disabled
            if quota is not None:
                message = (f"namespace {spec.namespace} has a quota, so GPU selection cannot be skipped: the "
                           "default Kubernetes scheduler's choice would not be charged to it")
                refused = ReplicaPlan(replica_index, DecisionOutcome.UNSCHEDULABLE, decision, message, elapsed * 1000,
                                      overrides={"outcome": DecisionOutcome.UNSCHEDULABLE.value, "message": message})
                raise NoCapacity(message, refused.matrix, replica_index)
            plan = ReplicaPlan(replica_index, DecisionOutcome.SKIPPED, decision, message, elapsed * 1000)
        elif (spec.allow_default_scheduler and quota is None
              and (busy := _telemetry_rejections(decision, scheduler))):
            message = (f"{message}; handed over to the default Kubernetes scheduler (no node affinity): "
                       f"{nodes_that(busy, 'has', 'have')} the capacity but "
                       f"{'is' if busy == 1 else 'are'} busy by telemetry")
            plan = ReplicaPlan(replica_index, DecisionOutcome.DEFAULT_SCHEDULER, decision, message, elapsed * 1000,
                               overrides={"outcome": DecisionOutcome.DEFAULT_SCHEDULER.value, "message": message})
        else:
            requests = [placement_request(spec, index, quota_before) for index in indexes]
            requests[position] = request
            raise _unplaced(scheduler, inventory, requests, position, plans, replica_index)
        plans.append(plan)
    return plans


def _unplaced(scheduler: Scheduler, inventory: InventorySnapshot, requests: list[PlacementRequest], position: int,
              plans: list[ReplicaPlan], replica_index: int) -> NoCapacity:
    """``NoCapacity`` for the replica at ``position``, explained against the inventory without the
    tentative reservations of the replicas before it (released here, see ``core.advice``)."""
    held = [plan.decision.assignment for plan in plans if plan.decision.assignment is not None]
    unplaced = explain_unplaced(scheduler, inventory.snapshot, requests, position, held)
    matrix = unplaced.result.to_dict()
    matrix["plugins"] = list(unplaced.result.weights)
    message = unplaced.message()
    matrix["message"] = message
    matrix["explanation"] = unplaced.to_dict()
    return NoCapacity(message, matrix, replica_index, explanation=unplaced.to_dict())
