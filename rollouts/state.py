"""The rollout state machines: which status may follow which, moved only through ``transition``.

Every move is the lifecycle helper's conditional UPDATE plus an audit event
(``rollingupdate.<status>``, ``rolloutnode.<state>``), so a racing user and reconciler cannot
both move the same row, and the event log tells the whole story of a rollout.
"""
from __future__ import annotations

from typing import Any

from django.utils import timezone

from lifecycle.transitions import transition
from rollouts.choices import NodeState, RolloutStatus
from rollouts.models import RollingUpdate, RolloutNode

S, N = RolloutStatus, NodeState

# to-status -> the statuses it may come from.
ROLLOUT_FROM: dict[str, tuple[str, ...]] = {
    S.RUNNING: (S.PENDING, S.PAUSED),
    S.PAUSED: (S.RUNNING,),
    S.SUCCEEDED: (S.RUNNING,),
    S.FAILED: (S.PENDING, S.RUNNING, S.PAUSED),
    S.ROLLED_BACK: (S.RUNNING, S.PAUSED),
    S.ABORTED: (S.PENDING, S.RUNNING, S.PAUSED),
}
_FINAL = (S.SUCCEEDED, S.FAILED, S.ROLLED_BACK, S.ABORTED)

# A node part-way changed (cordoned, owned by its rollout until it is done).
IN_FLIGHT = (N.PREWARMING, N.DRAINING, N.RECONFIGURING, N.VERIFYING)
NODE_FROM: dict[str, tuple[str, ...]] = {
    # From succeeded: rolled back through the same steps, towards its previous config.
    N.PREWARMING: (N.PENDING, N.SUCCEEDED),
    N.DRAINING: (N.PREWARMING,),
    N.RECONFIGURING: (N.DRAINING,),
    N.VERIFYING: (N.RECONFIGURING,),
    N.MOVING_BACK: (N.VERIFYING,),  # rollouts.move_back
    N.SUCCEEDED: (N.VERIFYING, N.MOVING_BACK),
    N.FAILED: IN_FLIGHT,
    # Not started when its rollout rolls back, or found holding a do-not-disrupt pod before
    # anything on it changed.
    N.SKIPPED: (N.PENDING, N.PREWARMING, N.DRAINING),
    # Proven back at its previous config (verifying), or stopped part-way and restored.
    N.ROLLED_BACK: (N.FAILED, N.SUCCEEDED, *IN_FLIGHT),
}


class IllegalTransition(ValueError):
    """A move the state machine does not have (a programming error, not a lost race)."""


def move_rollout(rollout: RollingUpdate, to: str, *, actor: Any = None, reason: str = "") -> bool:
    """Move ``rollout`` to status ``to``; False when it is no longer in a state that allows it."""
    if to not in ROLLOUT_FROM:
        raise IllegalTransition(f"a rollout never moves to {to!r}")
    now = timezone.now()
    values: dict[str, Any] = {"message": reason}
    if to == S.RUNNING and rollout.started_at is None:
        values["started_at"] = now
    if to in _FINAL:
        values["finished_at"] = now
    moved = transition(RollingUpdate, rollout.pk, ROLLOUT_FROM[to], to, actor=actor, reason=reason, values=values)
    if moved:
        rollout.status = to
        for name, value in values.items():
            setattr(rollout, name, value)
    return moved


def move_node(step: RolloutNode, to: str, *, actor: Any = None, reason: str = "",
              values: dict[str, Any] | None = None) -> bool:
    """Move one node of a rollout to state ``to``; False when it is no longer in a state that allows it.

    ``values``: further fields written in the same UPDATE (the reconciler's step bookkeeping)."""
    if to not in NODE_FROM:
        raise IllegalTransition(f"a rollout node never moves to {to!r}")
    changes: dict[str, Any] = {"reason": reason, **(values or {})}
    moved = transition(RolloutNode, step.pk, NODE_FROM[to], to, field="state", actor=actor, reason=reason,
                       values=changes)
    if moved:
        step.state = to
        for name, value in changes.items():
            setattr(step, name, value)
    return moved
