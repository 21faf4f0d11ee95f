"""The two beat tasks a plan's execution takes, one tick each at the fake clock's now: the
consolidation executor (starts approved plans, reads their moves' outcomes) and the mover
(``scheduler.services.moving``: carries the moves out)."""
from __future__ import annotations

from datetime import UTC, datetime

from consolidation import execution
from scheduler.services.moving import advance_moves


def execute_tick(cluster, clock) -> None:
    """One executor tick, one mover tick, and the executor reading what the mover did."""
    now = datetime.fromtimestamp(clock.now, UTC)
    execution.advance_plans(now=now)
    advance_moves(cluster=cluster, now=now)
    execution.advance_plans(now=now)
