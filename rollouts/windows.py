"""A rollout's maintenance window: a node's change starts only while it is open (docs/design.md section 5, step 1).

The window (``RollingUpdate.maintenance_window``, null: any time) gates the one step that
disrupts a node for the first time: leaving ``pending`` (cordon, pre-warm, then drain). A node
already part-way finishes its steps after the window closes: stopping it cordoned half-way
would be worse than finishing. Moving workloads back disrupts nothing and is not gated either.
Held nodes say what they wait for; so does the rollout (``waiting_message``), in the API and on
its page. The arithmetic (cron, time zone, DST) is ``scheduler.core.maintenance_window``.
"""
from __future__ import annotations

from datetime import datetime

from rollouts.choices import NodeState, RolloutStatus
from rollouts.models import RollingUpdate, RolloutNode
from scheduler.core.maintenance_window import InvalidWindow, MaintenanceWindow, WindowState, parse_window, window_state

__all__ = ["InvalidWindow", "hold_outside_window", "parse_window", "waiting_message", "window_of"]

FINISHED = (NodeState.SUCCEEDED, NodeState.SKIPPED, NodeState.FAILED, NodeState.ROLLED_BACK)


def window_of(rollout: RollingUpdate) -> MaintenanceWindow | None:
    """The rollout's window (validated when it was created), or None: any time."""
    if not rollout.maintenance_window:
        return None
    return parse_window(rollout.maintenance_window)


def closed_window(rollout: RollingUpdate, now: datetime) -> WindowState | None:
    """The window's state when it is closed at ``now``; None when steps may start."""
    window = window_of(rollout)
    if window is None:
        return None
    state = window_state(window, now)
    return None if state.open else state


def hold_outside_window(rollout: RollingUpdate, steps: list[RolloutNode], now: datetime) -> list[RolloutNode]:
    """The ``steps`` that may advance at ``now``: all of them inside the window; outside it, all
    but the pending ones, which are noted as waiting (not an audit event: nothing changed)."""
    closed = closed_window(rollout, now)
    if closed is None:
        return steps
    note = _waiting(closed, rollout)
    held = [s for s in steps if s.state == NodeState.PENDING]
    for step in held:
        if step.reason != note:
            RolloutNode.objects.filter(pk=step.pk, state=NodeState.PENDING).update(reason=note)
            step.reason = note
    return [s for s in steps if s.state != NodeState.PENDING]


def waiting_message(rollout: RollingUpdate, now: datetime) -> str:
    """"waiting for the maintenance window (opens ...)" while a running rollout's next node
    cannot start because the window is closed; "" otherwise. Reads ``rollout.nodes.all()`` (prefetch it)."""
    if rollout.status != RolloutStatus.RUNNING or not rollout.maintenance_window:
        return ""
    open_nodes = [n for n in rollout.nodes.all() if n.state not in FINISHED]
    if not open_nodes:
        return ""
    batch = min(n.batch_index or 0 for n in open_nodes)
    if not any(n.state == NodeState.PENDING and (n.batch_index or 0) == batch for n in open_nodes):
        return ""
    closed = closed_window(rollout, now)
    return _waiting(closed, rollout) if closed is not None else ""


def _waiting(closed: WindowState, rollout: RollingUpdate) -> str:
    window = rollout.maintenance_window or {}
    if closed.next_opens_at is None:
        return f"waiting for the maintenance window ({window.get('cron')} matches no date soon)"
    return (f"waiting for the maintenance window (opens {closed.next_opens_at:%Y-%m-%d %H:%M %Z}, "
            f"{window.get('timezone')})")
