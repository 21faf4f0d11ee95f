"""Blue-green: change a whole pool of nodes at once, after every workload on it runs elsewhere.

The target nodes are the blue pool. The preview plans them as one batch whose workloads go to
nodes outside it (the green pool: nodes already at the new config, or any node that can take
them, as ``rollouts.preview`` plans), and the reconciler cordons the whole batch before any
replica is placed. The steps are the rolling update's own (``rollouts.steps``); this module only
keeps the pool in phase, so that the cluster goes through the change in three clean moves:

1. pre-warm all: every blue node re-places its workloads on green nodes and waits until they are ready;
2. drain all: no blue node is drained before every one has pre-warmed;
3. reconfigure all together: no blue node switches its config before every one is drained;
   then each is verified and uncordoned as soon as it proves the new config.

A node that reaches a phase first waits there (``hold_for_pool``) with its step timer held, as
it does nothing: the timeout measures a step's own work, not its wait for the slowest sibling.
A node that fails leaves the pool's count (it is restored by its step), so the others go on
once the rollout is resumed.
"""
from __future__ import annotations

from datetime import datetime

from rollouts.choices import NodeState
from rollouts.models import RolloutNode
from rollouts.steps import note_waiting

# Each node state's place in the pool's sequence.
PHASE: dict[str, int] = {
    NodeState.PENDING: 0, NodeState.PREWARMING: 1, NodeState.DRAINING: 2, NodeState.RECONFIGURING: 3,
    NodeState.VERIFYING: 4, NodeState.MOVING_BACK: 5,
}
# A node in one of these starts its step only when no node of the pool is still in an earlier one.
BARRIERS: dict[str, str] = {
    NodeState.DRAINING: "waiting for the rest of the pool to finish pre-warming before any node is drained",
    NodeState.RECONFIGURING: "waiting for the rest of the pool to be drained, to reconfigure them together",
}


def hold_for_pool(runnable: list[RolloutNode], pool: list[RolloutNode], now: datetime) -> list[RolloutNode]:
    """The ``runnable`` nodes that may move on at ``now``; the others of a blue-green ``pool`` (its
    unfinished nodes) wait at a barrier, noted as waiting, their step timer restarted."""
    phases = [PHASE[s.state] for s in pool if s.state in PHASE]
    if not phases:
        return runnable
    slowest = min(phases)
    moving = []
    for step in runnable:
        if step.state in BARRIERS and PHASE[step.state] > slowest:
            RolloutNode.objects.filter(pk=step.pk, state=step.state).update(step_started_at=now)
            step.step_started_at = now
            note_waiting(step, BARRIERS[step.state])
        else:
            moving.append(step)
    return moving
