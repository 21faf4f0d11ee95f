"""Carrying out approved plans, one tick at a time (beat, every CONSOLIDATION_EXECUTE_INTERVAL_S).

An approved plan is first re-validated: against the plans being carried out and the moves other
operations have in flight (one touching its nodes or replicas aborts it, nothing evicted:
``consolidation.collisions``), then against the cluster now (``analysis.changed_nodes``): if any
node it relies on changed (a placement came or went, a GPU's allocation, cordon, readiness,
sharing config), it is aborted with nothing evicted, and the reason says what changed.

Otherwise it goes ``executing`` and asks the mover for one ``Move`` per plan move (to the plan's
target node; ``scheduler.services.moving`` carries it out, replacement first, the original evicted
through the Eviction API only, PodDisruptionBudgets and disruption budgets honoured). Each tick
then reads the moves' outcomes into the plan's ``progress`` (``moves``: per plan move its
``move``, ``state`` done / failed / waiting, ``new`` replacement, ``reason``; what holds a move
back is its ``blocked`` reason) and audits on the plan when a replacement is placed and when a
move is done or failed. A move the mover rolled back (its replacement did not fit or was not ready
in CONSOLIDATION_MOVE_TIMEOUT_S, a budget held it that long, or its replica was gone) kept its
original; the plan ends ``executed`` with the count of each.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from consolidation.analysis import changed_nodes
from consolidation.choices import PlanStatus
from consolidation.collisions import collisions, requester_of
from consolidation.models import PLAN_STATES, ConsolidationPlan
from lifecycle.audit import record
from lifecycle.errors import Conflict
from scheduler.choices import MoveRequester, MoveStatus
from scheduler.models import Move, Placement
from scheduler.services.moving import request_move

ACTOR = "consolidation"
REPLACEMENT_PLACED = "consolidationplan.replacement_placed"
MOVE_DONE = "consolidationplan.move_done"
MOVE_FAILED = "consolidationplan.move_failed"
P = PlanStatus
ENDED = {MoveStatus.DONE: "done", MoveStatus.FAILED: "failed", MoveStatus.ROLLED_BACK: "failed"}


def advance_plans(*, now: datetime | None = None) -> dict[str, list[int]]:
    """One tick: start every approved plan (or abort it), read the outcomes of every executing one."""
    moment = now or timezone.now()
    done: dict[str, list[int]] = {"started": [], "aborted": [], "advanced": []}
    for plan in ConsolidationPlan.objects.filter(status=P.APPROVED).order_by("pk"):
        done["started" if start(plan, moment) else "aborted"].append(plan.pk)
    for plan in ConsolidationPlan.objects.filter(status=P.EXECUTING).order_by("pk"):
        advance(plan)
        done["advanced"].append(plan.pk)
    return done


def start(plan: ConsolidationPlan, now: datetime) -> bool:
    """Re-validate ``plan``; executing (its moves asked for) when the cluster is as it relied on and
    nothing in flight touches its nodes or replicas, else aborted untouched."""
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
    if not PLAN_STATES.move(plan, P.EXECUTING, actor=ACTOR, reason="re-validated: the cluster is as the plan relied on",
                            values={"progress": {"started_at": now.isoformat(), "moves": {}}}):
        return False
    _ask_for_moves(plan)
    return True


def _save(plan: ConsolidationPlan) -> None:
    ConsolidationPlan.objects.filter(pk=plan.pk).update(progress=plan.progress)


def _ask_for_moves(plan: ConsolidationPlan) -> dict[str, dict[str, Any]]:
    """Ask the mover for each plan move not asked for yet (safe to repeat: asking twice is one move).
    A replica gone or moved by another operation meanwhile is a failed entry: nothing moved.

    A move this plan asked for before is adopted whatever its status: a tick that died between
    asking and saving the progress left it unnoted, and the mover may have ended it since (its
    original then gone: asking again would report "nothing moved" for a replica that moved)."""
    entries: dict[str, dict[str, Any]] = plan.progress.setdefault("moves", {})
    # The newest move per original (dict keeps the last of the ascending order).
    asked = dict(Move.objects.filter(requester=requester_of(plan)).order_by("pk").values_list("original_id", "pk"))
    for number, wanted in enumerate(plan.moves):
        entry = entries.setdefault(str(number), {})
        if "move" in entry or entry.get("state") in ("done", "failed"):
            continue
        if wanted["placement"] in asked:
            entry["move"] = asked[wanted["placement"]]
            continue
        original = Placement.objects.select_related("deployment", "node").filter(pk=wanted["placement"]).first()
        if original is None:
            entry.update(state="failed", reason=f"{wanted['workload']}: its replica is gone; nothing moved")
            continue
        try:
            move = request_move(original, why=wanted.get("why") or f"consolidation plan {plan.pk}",
                                requested_by=MoveRequester.CONSOLIDATION, requester=requester_of(plan),
                                to_node=wanted["to_node"], timeout_s=settings.CONSOLIDATION_MOVE_TIMEOUT_S)
        except Conflict as refused:
            entry.update(state="failed", reason=f"{wanted['workload']}: {refused.detail}; nothing moved")
            record(MOVE_FAILED, plan, actor=ACTOR, reason=entry["reason"])
            continue
        entry["move"] = move.pk
    _save(plan)
    return entries


def advance(plan: ConsolidationPlan) -> None:
    """Read the outcome of each of the plan's moves; executed once every one has ended."""
    entries = _ask_for_moves(plan)
    moves = Move.objects.in_bulk([e["move"] for e in entries.values() if "move" in e])
    waiting = 0
    for number, wanted in enumerate(plan.moves):
        entry = entries[str(number)]
        move = moves.get(entry.get("move", -1))
        if entry.get("state") in ("done", "failed") or move is None:
            continue
        _read(plan, wanted, entry, move)
        waiting += entry.get("state") not in ("done", "failed")
    _save(plan)
    if waiting:
        return
    failed = [e.get("reason", "") for e in entries.values() if e.get("state") == "failed"]
    reason = f"{len(plan.moves) - len(failed)} of {len(plan.moves)} move(s) done"
    if failed:
        reason += f"; kept where they were: {'; '.join(failed)}"
    PLAN_STATES.move(plan, P.EXECUTED, actor=ACTOR, reason=reason)


def _read(plan: ConsolidationPlan, wanted: dict[str, Any], entry: dict[str, Any], move: Move) -> None:
    """One move's news into its entry (and the plan's audit trail)."""
    entry["index"] = move.replacement_index
    entry["blocked"] = move.blocked_reason
    if move.replacement_id is not None and "new" not in entry:
        entry["new"] = move.replacement_id
        record(REPLACEMENT_PLACED, plan, actor=ACTOR,
               reason=f"{wanted['workload']}: replacement placed on {wanted['to_node']} (move {move.pk})",
               after={"original_placement": move.original_id, "new_placement": move.replacement_id})
    ended = ENDED.get(move.status)
    if ended is None:
        entry["state"] = "waiting"
        return
    entry["state"] = ended
    if ended == "done":
        record(MOVE_DONE, plan, actor=ACTOR,
               reason=f"{wanted['workload']}: ready on {wanted['to_node']}; the original on {wanted['from_node']} evicted",
               after={"original_placement": move.original_id, "new_placement": move.replacement_id})
        return
    entry["reason"] = f"{wanted['workload']}: {move.reason}"
    record(MOVE_FAILED, plan, actor=ACTOR, reason=entry["reason"], after={"move": move.pk})
