"""The plan's state machine: which status may follow which, moved only through ``move_plan``.

Each move is the lifecycle helper's conditional UPDATE plus an audit event
(``consolidationplan.<status>``), so an admin and the executor racing on a plan cannot both move it.
"""
from __future__ import annotations

from typing import Any

from django.utils import timezone

from consolidation.choices import FINAL_STATUSES, PlanStatus
from consolidation.models import ConsolidationPlan
from lifecycle.transitions import transition

P = PlanStatus
PLAN_FROM: dict[str, tuple[str, ...]] = {
    P.APPROVED: (P.PROPOSED,),
    P.REJECTED: (P.PROPOSED,),
    P.EXPIRED: (P.PROPOSED,),
    P.EXECUTING: (P.APPROVED,),
    P.EXECUTED: (P.EXECUTING,),
    P.ABORTED: (P.APPROVED, P.EXECUTING),
}


def move_plan(plan: ConsolidationPlan, to: str, *, actor: Any = None, reason: str = "",
              values: dict[str, Any] | None = None) -> bool:
    """Move ``plan`` to ``to``; False when it is no longer in a status that allows it."""
    if to not in PLAN_FROM:
        raise ValueError(f"a consolidation plan never moves to {to!r}")
    changes: dict[str, Any] = {"reason": reason, **(values or {})}
    if to in FINAL_STATUSES:
        changes["finished_at"] = timezone.now()
    moved = transition(ConsolidationPlan, plan.pk, PLAN_FROM[to], to, actor=actor, reason=reason, values=changes)
    if moved:
        plan.status = to
        for name, value in changes.items():
            setattr(plan, name, value)
    return moved
