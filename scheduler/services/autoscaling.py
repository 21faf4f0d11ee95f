"""Changing a deployment's replicas: by hand (PATCH, operator) or by its autoscaling policy.

``scale_deployment`` is the one way replicas change after a deploy. More replicas go through the
placement pipeline one at a time (``place_replicas``: a recorded decision matrix each, its
reservations, its workload), so a cluster that fits three of five new replicas gets three
(outcome ``partial``). Fewer replicas leave one at a time, the one ``choose_victim`` names first
(a replica not ready yet, then the most expensive per request served, then the newest), through
``remove_replica``.

Scale-down and the mover (docs/design.md section 5a): ``remove_replica`` asks the mover for a
removal (``moving.request_removal``: the pod evicted through the Eviction API under the PDBs and
disruption budgets, then its placement released). The target (``replicas``) drops at once; the
replicas leave as the mover gets to them. Counts are of what will serve once the moves in flight
end (``serving_count``), so a replica already on its way out is never removed twice, and a
scale-up first takes back removals not started yet (cheaper than placing anew). Two scale
requests of one deployment (a PATCH and the autoscaler's tick) take turns (``SCALE_LOCK``): the
second is refused with a 409 (the autoscaler tries again next round). The stored ``replicas`` is
then written as the serving count, under the deployment's row, which the mover also takes when
a removal is given up (its replica counts again): active placements = replicas once moves end.

``evaluate`` runs a deployment's policy on one monitoring sample (``monitoring.sample_for``) and
applies what it decides; every evaluation that changes something, and one per
``AUTOSCALE_RECORD_INTERVAL_S`` otherwise, is stored as a ``ScalingEvent`` with its inputs.
"""
from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from lifecycle.audit import record
from lifecycle.errors import Conflict, InvalidRequest
from lifecycle.locks import tick_lock
from nodes.cluster.base import ClusterBackend, ClusterError
from nodes.gpu_costs import gpu_prices
from scheduler.choices import MOVE_IN_FLIGHT, MoveKind, MoveRequester, MoveStatus, PlacementStatus
from scheduler.core.autoscale import (
    DEFAULT_POLICY,
    DOWN,
    HOLD,
    NONE,
    UP,
    Decision,
    ReplicaView,
    Sample,
    ScalingState,
    choose_victim,
    decide,
)
from scheduler.core.autoscale_hpa import hpa_manifest
from scheduler.models import Deployment, Move, Placement, ScalingEvent
from scheduler.services import feedback, monitoring
from scheduler.services.errors import NoCapacity
from scheduler.services.monitoring import measured_cold_start_s, predicted_capacity
from scheduler.services.moving import cancel_move, request_removal
from scheduler.services.placing import next_replica_index, place_replicas
from scheduler.services.releasing import ACTIVE_PLACEMENT
from scheduler.services.scaling_config import autoscale_settings, validate_autoscale
from scheduler.services.watching import ACTIVE

logger = logging.getLogger(__name__)

MANUAL = "manual"
SCALE_LOCK = "gpuplane:scale:deployment:{pk}"
SCALE_LOCK_TTL_S = 300  # where it is a cache entry (not PostgreSQL): longer than any scale runs


def active_placements(deployment: Deployment) -> list[Placement]:
    return list(deployment.placements.filter(status__in=ACTIVE_PLACEMENT).select_related("node")
                .order_by("replica_index"))


def serving_count(deployment: Deployment) -> int:
    """How many replicas ``deployment`` will have once the moves in flight end: its active placements
    but the originals of removals, and of moves whose replacement is active (one query, one snapshot)."""
    leaving = Move.objects.filter(original=OuterRef("pk"), status__in=MOVE_IN_FLIGHT).filter(
        Q(kind=MoveKind.REMOVAL) | Q(replacement__status__in=ACTIVE_PLACEMENT))
    return Placement.objects.filter(deployment_id=deployment.pk, status__in=ACTIVE_PLACEMENT).exclude(
        Exists(leaving)).count()


def remove_replica(deployment: Deployment, placement: Placement, *, user: Any, reason: str) -> Move:
    """Ask the mover to remove one replica for a scale-down (a removal; Conflict when it cannot)."""
    return request_removal(placement, why=reason, requested_by=MoveRequester.SCALE_DOWN,
                           requester=f"scale-down:{deployment.pk}", actor=user)


def _in_moves(deployment: Deployment) -> set[int]:
    """Placements of ``deployment`` that a move in flight takes away or brings: never a victim."""
    moves = Move.objects.filter(deployment_id=deployment.pk, status__in=MOVE_IN_FLIGHT)
    return {pk for pair in moves.values_list("original_id", "replacement_id") for pk in pair if pk is not None}


def _take_back_removals(deployment: Deployment, count: int, cluster: ClusterBackend | None) -> int:
    """Give up to ``count`` of the deployment's scale-down removals not started yet (the newest
    first): each replica serves on and counts again. How many."""
    taken = 0
    pending = Move.objects.filter(deployment_id=deployment.pk, kind=MoveKind.REMOVAL, status=MoveStatus.PLANNED,
                                  requested_by=MoveRequester.SCALE_DOWN).select_related("deployment")
    for removal in pending.order_by("-pk")[:count]:
        taken += cancel_move(removal, reason="scaled up again before it was evicted", cluster=cluster)
    return taken


def _victims(deployment: Deployment, count: int) -> list[Placement]:
    busy = _in_moves(deployment)
    placements = [p for p in active_placements(deployment) if p.pk not in busy]
    prices = gpu_prices()
    chosen: list[Placement] = []
    for _ in range(min(count, len(placements))):
        views = []
        for p in placements:
            model = p.node.gpu_model if p.node is not None else ""
            price = prices[model].usd_per_hour if model in prices else 0.0
            share = max(len(p.gpu_indexes), 1) * (p.share_milli or 1000) / 1000
            views.append(ReplicaView(str(p.pk), price * share, 1.0, p.status == PlacementStatus.RUNNING,
                                     p.created_at.timestamp() if p.created_at else 0.0))
        victim = choose_victim(views)
        if victim is None:
            break
        picked = next(p for p in placements if str(p.pk) == victim.key)
        chosen.append(picked)
        placements.remove(picked)
    return chosen


def scale_deployment(deployment: Deployment, replicas: int, *, user: Any = None, policy: str = MANUAL,
                     decision: Decision | None = None, inputs: dict[str, Any] | None = None,
                     cluster: ClusterBackend | None = None, at: datetime | None = None) -> ScalingEvent:
    """Bring ``deployment`` to ``replicas`` replicas; returns the stored ``ScalingEvent``.

    Raises ``InvalidRequest`` (400) for a count outside 1..``DEPLOYMENT_MAX_REPLICAS`` and
    ``Conflict`` (409) for a deployment that is not active or is being scaled by another request
    now. Capacity or cluster failures part-way are not raised: the event says how far it got
    (partial / failed) and why. A scale-down's replicas leave through the mover, later."""
    maximum = settings.DEPLOYMENT_MAX_REPLICAS
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= maximum:
        raise InvalidRequest({"replicas": [f"must be a whole number from 1 to {maximum}"]})
    with tick_lock(SCALE_LOCK.format(pk=deployment.pk), ttl_s=SCALE_LOCK_TTL_S) as acquired:
        if not acquired:
            raise Conflict(f"{deployment} is being scaled by another request right now; try again in a moment")
        return _scale(deployment, replicas, user=user, policy=policy, decision=decision, inputs=inputs,
                      cluster=cluster, at=at)


def _scale(deployment: Deployment, replicas: int, *, user: Any, policy: str, decision: Decision | None,
           inputs: dict[str, Any] | None, cluster: ClusterBackend | None, at: datetime | None) -> ScalingEvent:
    deployment.refresh_from_db()
    if deployment.status not in ACTIVE:
        raise Conflict(f"{deployment} is {deployment.status}: only an active deployment can be scaled")
    when = at or timezone.now()
    before = serving_count(deployment)
    who = user if policy == MANUAL else f"autoscaler ({policy})"
    messages: list[str] = []
    if replicas > before:
        missing = replicas - before - _take_back_removals(deployment, replicas - before, cluster)
        for _ in range(missing):
            try:
                place_replicas(deployment, [next_replica_index(deployment)], user=who, cluster=cluster)
            except NoCapacity as error:
                messages.append(error.message)
                break
            except ClusterError as error:
                messages.append(str(error))
                break
            deployment.refresh_from_db()
    elif replicas < before:
        reason = (decision.reason if decision is not None else "scaled by hand") + " (scale-down)"
        victims = _victims(deployment, before - replicas)
        for placement in victims:
            try:
                remove_replica(deployment, placement, user=who, reason=reason)
            except Conflict as error:  # taken by another operation meanwhile: it stays
                messages.append(str(error))
        if len(victims) < before - replicas:
            messages.append(f"{before - len(victims)} replica(s) stay for now: the others are being moved")
    with transaction.atomic():
        # Under the row the mover takes to give a removal up: the count and the write agree.
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        reached = serving_count(locked)
        if reached == replicas:
            outcome = ScalingEvent.Outcome.APPLIED if replicas != before else ScalingEvent.Outcome.HELD
        elif reached != before:
            outcome = ScalingEvent.Outcome.PARTIAL
        else:
            outcome = ScalingEvent.Outcome.FAILED
        previous = locked.replicas
        if reached != previous and reached >= 1:
            locked.replicas = reached
            locked.save(update_fields=["replicas", "updated_at"])
        action = UP if replicas > before else DOWN if replicas < before else HOLD
        event = ScalingEvent.objects.create(
            deployment=locked, at=when, policy=policy, action=action, replicas_before=before, replicas_after=reached,
            inputs=inputs or {}, decision=decision.to_dict() if decision is not None else
            {"policy": MANUAL, "action": action, "replicas": replicas, "current": before, "reason": "by hand"},
            outcome=outcome, message="; ".join(messages), actor="" if policy != MANUAL else _name(user))
        if reached != before or previous != locked.replicas:
            record("deployment.scaled", locked, actor=who,
                   reason=(decision.reason if decision is not None else "replicas changed by hand")
                   + (f" ({outcome}: {'; '.join(messages)})" if messages else "")
                   + (" (the removed replicas leave through the mover)" if reached < before else ""),
                   before={"replicas": previous}, after={"replicas": locked.replicas})
    deployment.replicas = locked.replicas
    return event


def _name(user: Any) -> str:
    if user is None:
        return ""
    if isinstance(user, str):
        return user
    return str(user.get_username()) if getattr(user, "is_authenticated", False) else ""


def load_state(deployment: Deployment) -> ScalingState:
    raw = dict(deployment.autoscale_state or {})
    replicas = serving_count(deployment) or deployment.replicas
    try:
        return ScalingState(
            replicas=replicas,
            up_since=raw.get("up_since"), down_since=raw.get("down_since"),
            last_up_at=raw.get("last_up_at"), last_down_at=raw.get("last_down_at"),
            recommendations=tuple((float(a), int(r)) for a, r in raw.get("recommendations", ())),
            changes=tuple((float(a), int(r)) for a, r in raw.get("changes", ())),
            load_rps=float(raw.get("load_rps", 0.0)), load_at=raw.get("load_at"),
            trend_rps_per_s=float(raw.get("trend_rps_per_s", 0.0)),
        )
    except (TypeError, ValueError):
        return ScalingState(replicas=replicas)  # a state from an older version: start afresh


def _store_state(deployment: Deployment, state: ScalingState, extra: dict[str, Any]) -> None:
    data = {**dict(deployment.autoscale_state or {}), **asdict(state), **extra}  # the source's own keys stay
    data.pop("replicas")
    Deployment.objects.filter(pk=deployment.pk).update(autoscale_state=data)
    deployment.autoscale_state = data


def evaluate(deployment: Deployment, sample: Sample, *, cluster: ClusterBackend | None = None,
             now: datetime | None = None) -> ScalingEvent | None:
    """Run the deployment's policy on ``sample`` and apply its decision; the stored event, or None
    when a held evaluation was not due for a record."""
    when = now or timezone.now()
    policy = deployment.autoscale_policy or DEFAULT_POLICY
    config = autoscale_settings(deployment)
    state = load_state(deployment)
    decision, state = decide(policy, sample, state, when.timestamp(), config)
    inputs = dict(decision.inputs)
    previous = dict(deployment.autoscale_state or {})
    last_record = float(previous.get("recorded_at", 0.0))
    if decision.changes:
        event = scale_deployment(deployment, decision.replicas, policy=policy, decision=decision, inputs=inputs,
                                 cluster=cluster, at=when)
        state = ScalingState(**{**asdict(state), "replicas": event.replicas_after})
        _store_state(deployment, state, {"recorded_at": when.timestamp()})
        return event
    due = when.timestamp() - last_record >= settings.AUTOSCALE_RECORD_INTERVAL_S or decision.action == NONE
    _store_state(deployment, state, {"recorded_at": when.timestamp() if due else last_record})
    if not due:
        return None
    outcome = ScalingEvent.Outcome.NO_DECISION if decision.action == NONE else ScalingEvent.Outcome.HELD
    return ScalingEvent.objects.create(
        deployment=deployment, at=when, policy=policy, action=decision.action, replicas_before=decision.current,
        replicas_after=decision.current, inputs=inputs, decision=decision.to_dict(), outcome=outcome,
        message=decision.reason if decision.action == NONE else "")


def autoscaled_deployments() -> list[Deployment]:
    return list(Deployment.objects.filter(status__in=ACTIVE, autoscale_native=False)
                .exclude(autoscale_policy="").order_by("pk"))


def timeline(deployment: Deployment, limit: int = 2000) -> list[ScalingEvent]:
    """The newest ``limit`` scaling events of a deployment, oldest first (the page's chart)."""
    events = list(deployment.scaling_events.order_by("-at", "-id")[:limit])
    events.reverse()
    return events


def autoscale_all(*, cluster: ClusterBackend | None = None, now: datetime | None = None) -> dict[str, int]:
    """One monitoring round: every autoscaled deployment sampled, fed to the feedback (while its
    replicas are saturated) and evaluated. Returns how many evaluations ended how."""
    when = now or timezone.now()
    counts: dict[str, int] = {}
    for deployment in autoscaled_deployments():
        try:
            sample, observations = monitoring.monitor(deployment, when)
            for seen in observations:
                feedback.observe(deployment.model, seen.gpu_model, seen.sharing_mode, seen.predicted_rps,
                                 seen.measured_rps)
            event = evaluate(deployment, sample, cluster=cluster, now=when)
        except (ClusterError, Conflict) as error:  # one deployment's trouble never stops the round
            logger.warning("autoscale %s: %s", deployment, error)
            counts["error"] = counts.get("error", 0) + 1
            continue
        key = event.outcome if event is not None else "not recorded"
        counts[key] = counts.get(key, 0) + 1
    return counts


def configure_autoscaling(deployment: Deployment, *, user: Any, policy: str | None = None,
                          overrides: Any = None, native: bool | None = None) -> Deployment:
    """Change a deployment's autoscaling (policy, overrides, native mode); one audit event."""
    new_policy = deployment.autoscale_policy if policy is None else policy
    new_overrides = deployment.autoscale_settings if overrides is None else overrides
    checked = validate_autoscale(new_policy, new_overrides)
    new_native = deployment.autoscale_native if native is None else bool(native)  # no HPA-shaped policy: the default's
    before = {"autoscale_policy": deployment.autoscale_policy, "autoscale_settings": deployment.autoscale_settings,
              "autoscale_native": deployment.autoscale_native}
    after = {"autoscale_policy": new_policy, "autoscale_settings": checked, "autoscale_native": new_native}
    if before == after:
        return deployment
    deployment.autoscale_policy, deployment.autoscale_settings, deployment.autoscale_native = (
        new_policy, checked, new_native)
    if before["autoscale_policy"] != new_policy:
        deployment.autoscale_state = {}  # another policy's memory means nothing to this one
    deployment.save(update_fields=["autoscale_policy", "autoscale_settings", "autoscale_native",
                                   "autoscale_state", "updated_at"])
    record("deployment.autoscale", deployment, actor=user, reason="autoscaling changed", before=before, after=after)
    return deployment


def native_hpa(deployment: Deployment) -> dict[str, Any]:
    """The autoscaling/v2 HPA of a deployment in native mode (its first workload as the target; the
    default policy's when the deployment has none that an HPA can express)."""
    placements = active_placements(deployment)
    config = autoscale_settings(deployment)
    first = placements[0] if placements else None
    gpu_model = first.node.gpu_model if first is not None and first.node is not None else ""
    # A deployment without an HPA-shaped policy (none, static) gets the default policy's HPA.
    policy = deployment.autoscale_policy if deployment.autoscale_policy in ("seed", "hpa", "gpuplane") else DEFAULT_POLICY
    capacity = predicted_capacity(gpu_model, first.sharing, first.share_milli, config.tpot_slo_s) if first else None
    return hpa_manifest(name=f"{deployment.name}-hpa"[:63], namespace=deployment.namespace,
                        deployment_id=str(deployment.pk),
                        target_name=(first.workload_name if first is not None else "") or deployment.name,
                        policy=policy, settings=config, capacity_rps_per_replica=capacity,
                        cold_start_s=measured_cold_start_s(deployment))
