"""Rollouts created but never started: past their ``start_by`` they expire and release their nodes.

A pending rollout owns its target nodes (``preview.owned_elsewhere`` refuses another rollout of
them), so one nobody starts would hold them forever. Each reconciler tick moves every pending
rollout whose ``start_by`` has passed to ``expired`` (a final status: its nodes are free again),
and its nodes, none of which was touched, to ``skipped`` with the reason; starting one that is
past due expires it instead (``rollouts.control``).
"""
from __future__ import annotations

from datetime import datetime

from rollouts.choices import NodeState, RolloutStatus
from rollouts.models import NODE_STATES, ROLLOUT_STATES, RollingUpdate

ACTOR = "system:rollouts"


def expired(rollout: RollingUpdate, now: datetime) -> bool:
    """True when ``rollout`` is pending and past its ``start_by``."""
    return rollout.status == RolloutStatus.PENDING and rollout.start_by is not None and rollout.start_by <= now


def expire(rollout: RollingUpdate) -> bool:
    """Expire one pending rollout (its untouched nodes skipped); False when it is no longer pending."""
    when = rollout.start_by.isoformat() if rollout.start_by else "its deadline"
    reason = f"not started before {when}: expired, its nodes are released (create it again to go on)"
    if not ROLLOUT_STATES.move(rollout, RolloutStatus.EXPIRED, actor=ACTOR, reason=reason):
        return False
    for step in rollout.nodes.filter(state=NodeState.PENDING).order_by("node_name"):
        NODE_STATES.move(step, NodeState.SKIPPED, actor=ACTOR, reason="the rollout expired before it was started")
    return True


def expire_unstarted(now: datetime) -> list[int]:
    """Expire every pending rollout past its ``start_by``; their ids."""
    due = RollingUpdate.objects.filter(status=RolloutStatus.PENDING, start_by__lte=now).order_by("pk")
    return [rollout.pk for rollout in due if expire(rollout)]
