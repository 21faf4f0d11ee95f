"""What an admin does to a plan: approve or reject it (with a reason); and plans that expire.

``NotAllowed`` (a 409) says why a plan's status does not allow the action, or why approving it
would collide with an approved or executing plan (``consolidation.collisions``). A proposed plan past
its ``expires_at`` is moved to ``expired`` first, so it can never be approved late: the cluster
it was computed on is too old to trust. Approving only moves the plan; the executor's tick
(``consolidation.execution``) re-validates it and does the moves.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from consolidation.choices import PlanStatus
from consolidation.collisions import collisions, plan_lock
from consolidation.models import PLAN_STATES, ConsolidationPlan
from lifecycle.errors import Conflict

P = PlanStatus


class NotAllowed(Conflict):
    """The plan's status (``status``, in the answer) does not allow the action (409); the message says why."""


def expire_stale(now: datetime | None = None) -> int:
    """Move every proposed plan past its ``expires_at`` to expired; how many."""
    moment = now or timezone.now()
    expired = 0
    for plan in ConsolidationPlan.objects.filter(status=P.PROPOSED, expires_at__lte=moment):
        expired += PLAN_STATES.move(plan, P.EXPIRED, actor="consolidation",
                                    reason=f"not approved before it expired at {plan.expires_at.isoformat()}")
    return expired


def _expire_if_due(plan: ConsolidationPlan) -> None:
    """Read the plan again; a proposed one past its ``expires_at`` is expired first (committed)."""
    plan.refresh_from_db()
    if plan.status == P.PROPOSED and plan.expires_at <= timezone.now():
        PLAN_STATES.move(plan, P.EXPIRED, actor="consolidation",
                         reason=f"not approved before it expired at {plan.expires_at.isoformat()}")
        plan.refresh_from_db()


def _decide(plan: ConsolidationPlan, to: str, action: str, actor: Any, reason: str) -> ConsolidationPlan:
    if plan.status != P.PROPOSED:
        raise NotAllowed(f"Cannot {action} a plan that is {plan.status}: only a proposed one"
                         + (" (it expired; run the analysis again)" if plan.status == P.EXPIRED else "") + ".",
                         status=plan.status)
    if not PLAN_STATES.move(plan, to, actor=actor, reason=reason, values={"decided_by": actor if getattr(actor, "pk", None) else None}):
        plan.refresh_from_db()
        raise NotAllowed(f"Cannot {action} a plan that is {plan.status}: only a proposed one.", status=plan.status)
    plan.refresh_from_db()
    return plan


def approve(plan: ConsolidationPlan, *, actor: Any = None) -> ConsolidationPlan:
    """Approve a proposed plan; NotAllowed (409) when it is not proposed, has no moves, or collides
    with an approved or executing plan (``consolidation.collisions``: the reason names it)."""
    if not plan.moves:
        raise NotAllowed("This plan has no moves: there is nothing to approve (it only answers the analysis).",
                         status=plan.status)
    who = getattr(actor, "username", actor) or "system"
    _expire_if_due(plan)
    with transaction.atomic():
        plan_lock()  # two approvals check each other's plans in turn
        found = collisions(plan) if plan.status == P.PROPOSED else []
        if found:
            plan.refresh_from_db()
            raise NotAllowed(f"Cannot approve plan {plan.pk}: {'; '.join(found)}. Wait until that plan is done, "
                             "then run the analysis again.", status=plan.status)
        return _decide(plan, P.APPROVED, "approve", actor, f"approved by {who}")


def reject(plan: ConsolidationPlan, reason: str, *, actor: Any = None) -> ConsolidationPlan:
    if not reason.strip():
        raise ValueError("a rejection needs a reason")
    who = getattr(actor, "username", actor) or "system"
    _expire_if_due(plan)
    return _decide(plan, P.REJECTED, "reject", actor, f"rejected by {who}: {reason.strip()}")
