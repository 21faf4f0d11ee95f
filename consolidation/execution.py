"""Carrying out approved plans, one tick at a time (beat, every CONSOLIDATION_EXECUTE_INTERVAL_S).

An approved plan is first re-validated: against the plans being carried out (one touching its
nodes or replicas aborts it, nothing evicted: ``consolidation.collisions``), then against the
cluster now (``analysis.changed_nodes``): if any node it relies on changed (a placement came or
went, a GPU's allocation, cordon, readiness, sharing config), it is aborted with nothing
evicted, and the reason says what changed.
Otherwise it goes ``executing`` and each tick advances every move, replacement first:

1. place a new replica of the workload's deployment on the move's target node (the placement
   services with the decision limited to that node; the replica index is chosen and persisted
   first, so a crashed tick adopts what it placed instead of placing another; a reservation a
   crashed tick left without a workload is given back, and an index whose attempt is over is
   spent, so the replacement then gets a fresh one, as in ``scheduler.services.replacing``);
2. wait until that replica is ready;
3. only then release the original (``release_replica``).

So a workload never has fewer ready replicas than it had. A move whose replacement does not fit
or is not ready within CONSOLIDATION_MOVE_TIMEOUT_S keeps its original (the replacement is
released) and is reported failed; the plan ends ``executed`` with the count of each. Every step
is an audit event on the plan.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from consolidation.analysis import changed_nodes
from consolidation.choices import PlanStatus
from consolidation.collisions import collisions
from consolidation.models import PLAN_STATES, ConsolidationPlan
from lifecycle.audit import record
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError
from scheduler.models import Deployment, Placement
from scheduler.services.errors import DeployFailed, NoCapacity
from scheduler.services.releasing import ACTIVE_PLACEMENT
from scheduler.services.replacing import (
    Finish,
    finish_replacement,
    give_back_half_placed,
    place_replacement,
    replacement_index,
)

ACTOR = "consolidation"
REPLACEMENT_PLACED = "consolidationplan.replacement_placed"
MOVE_DONE = "consolidationplan.move_done"
MOVE_FAILED = "consolidationplan.move_failed"
P = PlanStatus


def advance_plans(*, cluster: ClusterBackend | None = None, now: datetime | None = None) -> dict[str, list[int]]:
    """One tick: start every approved plan (or abort it), advance every executing one."""
    backend = cluster if cluster is not None else get_cluster()
    moment = now or timezone.now()
    done: dict[str, list[int]] = {"started": [], "aborted": [], "advanced": []}
    for plan in ConsolidationPlan.objects.filter(status=P.APPROVED).order_by("pk"):
        done["started" if start(plan, moment) else "aborted"].append(plan.pk)
    for plan in ConsolidationPlan.objects.filter(status=P.EXECUTING).order_by("pk"):
        advance(plan, backend, moment)
        done["advanced"].append(plan.pk)
    return done


def start(plan: ConsolidationPlan, now: datetime) -> bool:
    """Re-validate ``plan``; executing when the cluster is as it relied on and no executing plan
    touches its nodes or replicas, else aborted untouched."""
    overlaps = collisions(plan, (P.EXECUTING,))
    if overlaps:
        PLAN_STATES.move(plan, P.ABORTED, actor=ACTOR,
                         reason=f"it collides with a plan being carried out ({'; '.join(overlaps)}); nothing was evicted")
        return False
    changes = changed_nodes(plan)
    if changes:
        PLAN_STATES.move(plan, P.ABORTED, actor=ACTOR,
                         reason=f"the cluster changed since the plan was made ({'; '.join(changes)}); nothing was evicted")
        return False
    return PLAN_STATES.move(plan, P.EXECUTING, actor=ACTOR, reason="re-validated: the cluster is as the plan relied on",
                            values={"progress": {"started_at": now.isoformat(), "moves": {}}})


def _save(plan: ConsolidationPlan) -> None:
    ConsolidationPlan.objects.filter(pk=plan.pk).update(progress=plan.progress)


def _fail(plan: ConsolidationPlan, entry: dict[str, Any], reason: str) -> None:
    entry.update(state="failed", reason=reason)
    _save(plan)
    record(MOVE_FAILED, plan, actor=ACTOR, reason=reason)


def advance(plan: ConsolidationPlan, cluster: ClusterBackend, now: datetime) -> None:
    """Advance each move of an executing plan (see the module docstring)."""
    started = datetime.fromisoformat(plan.progress.get("started_at", now.isoformat()))
    timed_out = now - started > timedelta(seconds=settings.CONSOLIDATION_MOVE_TIMEOUT_S)
    entries: dict[str, dict[str, Any]] = plan.progress.setdefault("moves", {})
    waiting = 0
    for number, move in enumerate(plan.moves):
        entry = entries.setdefault(str(number), {})
        if entry.get("state") in ("done", "failed"):
            continue
        try:
            waiting += _advance_move(plan, move, entry, cluster, timed_out)
        except ClusterError as error:  # the next tick retries: every call here is safe to repeat
            entry["note"] = str(error)
            _save(plan)
            waiting += 1
    if waiting:
        return
    failed = [e.get("reason", "") for e in entries.values() if e.get("state") == "failed"]
    reason = f"{len(plan.moves) - len(failed)} of {len(plan.moves)} move(s) done"
    if failed:
        reason += f"; kept where they were: {'; '.join(failed)}"
    PLAN_STATES.move(plan, P.EXECUTED, actor=ACTOR, reason=reason)


def _choose_index(plan: ConsolidationPlan, entry: dict[str, Any], deployment: Deployment,
                  cluster: ClusterBackend) -> None:
    """Persist the replica index the move's replacement is placed under, before placing it, so a
    tick that dies after placing adopts that replacement. A reservation a dead tick left without
    a workload is given back (its pod never comes), and then, like any index whose attempt is
    over, that index is spent: the replacement gets a fresh one."""
    chosen = entry.get("index")
    if chosen is not None:
        give_back_half_placed(deployment, chosen, cluster=cluster, user=ACTOR,
                              reason=f"reserved by a tick of consolidation plan {plan.pk} that died "
                                     "before its workload was created")
    index = replacement_index(deployment, chosen)
    if index != chosen:
        entry["index"] = index
        _save(plan)


def _advance_move(plan: ConsolidationPlan, move: dict[str, Any], entry: dict[str, Any], cluster: ClusterBackend,
                  timed_out: bool) -> int:
    """Do the next piece of one move; 1 while it waits for its replacement, else 0."""
    original = Placement.objects.select_related("deployment").filter(pk=move["placement"]).first()
    if original is None or original.status not in ACTIVE_PLACEMENT:
        _fail(plan, entry, f"{move['workload']}: its replica is gone; nothing moved")
        return 0
    deployment = original.deployment
    if "new" not in entry:
        if timed_out:
            _fail(plan, entry, f"{move['workload']}: not moved within {settings.CONSOLIDATION_MOVE_TIMEOUT_S} s")
            return 0
        _choose_index(plan, entry, deployment, cluster)
        try:
            replacement = place_replacement(deployment, entry["index"], cluster=cluster, user=ACTOR,
                                            node=move["to_node"])
        except (NoCapacity, DeployFailed, ValueError) as error:
            _fail(plan, entry, f"{move['workload']} does not fit {move['to_node']} now: {error}")
            return 0
        entry["new"] = replacement.pk
        _save(plan)
        record(REPLACEMENT_PLACED, plan, actor=ACTOR,
               reason=f"{move['workload']}: replacement (replica {replacement.replica_index}) placed on {move['to_node']}",
               after={"original_placement": original.pk, "new_placement": replacement.pk})
    new = Placement.objects.select_related("deployment").get(pk=entry["new"])
    finish = finish_replacement(original, new, cluster=cluster, user=ACTOR, timed_out=timed_out,
                                moved_reason=f"moved to {move['to_node']} by consolidation plan {plan.pk}",
                                not_ready_reason=f"not ready on {move['to_node']} in time; the original stays")
    if finish == Finish.NOT_STARTED:
        _fail(plan, entry, f"{move['workload']}: its replacement on {move['to_node']} did not start ({new.status})")
        return 0
    if finish == Finish.NOT_READY_IN_TIME:
        _fail(plan, entry, f"{move['workload']}: its replacement was not ready in time")
        return 0
    if finish == Finish.WAITING:
        return 1
    entry["state"] = "done"
    _save(plan)
    record(MOVE_DONE, plan, actor=ACTOR,
           reason=f"{move['workload']}: ready on {move['to_node']}; the original on {move['from_node']} released",
           after={"original_placement": original.pk, "new_placement": new.pk})
    return 0
