"""Rolling a rollout back (``on_failure: rollback``): the nodes it changed go back to their previous config.

A rollout rolls back once one of its nodes failed (restored already by its own step) and its
``on_failure`` is ``rollback``; that is read from the rows on every tick, so nothing else marks
it and a reconciler that died anywhere picks it up again. Each tick of a rolling-back rollout:

1. nodes not started yet are ``skipped`` ("not started: ..."): nothing on them changed, so
   there is nothing to undo (``rolled-back`` is kept for nodes whose change was undone);
2. nodes part-way through the forward change (the failed node's batch siblings) are stopped and
   restored as a failed node is (previous labels, copies given up, uncordoned): ``rolled-back``,
   or ``failed`` with what could not be undone;
3. the ``succeeded`` nodes go back, latest batch first and a batch at a time (so never more than
   ``max_unavailable`` out of service), through the very steps that changed them
   (``rollouts.steps``) with the target taken from each node's ``previous_config``: pre-warm
   elsewhere, drain by eviction, labels switched back, plugin restarted, proof, uncordon ->
   ``rolled-back``. A node whose rollback fails is restored to the rollout's config and failed.

When nothing is left to undo the rollout ends ``rolled-back``, or ``failed`` when some node
could not be rolled back. Every move is a state transition with its audit event.
"""
from __future__ import annotations

from datetime import datetime

from lifecycle.transitions import transition
from nodes.cluster.base import ClusterBackend
from nodes.sharing.node_config import NodeConfig
from rollouts.choices import IN_FLIGHT, NodeState, OnFailure, RolloutStatus
from rollouts.models import NODE_STATES, ROLLOUT_STATES, RollingUpdate, RolloutNode
from rollouts.move_back import advance_move_back
from rollouts.restoring import ACTOR, restore
from rollouts.steps import ROLLBACK, advance_node, cordon_batch, rolling_back

ROLLING_BACK = "rolling back"
ROLLBACK_STARTED = "rollingupdate.rolling_back"


def rolls_back(rollout: RollingUpdate, steps: list[RolloutNode]) -> bool:
    """True when ``rollout`` is rolling back: a node failed and its policy is to roll back."""
    return rollout.on_failure == OnFailure.ROLLBACK and any(s.state == NodeState.FAILED for s in steps)


def advance_rollback(rollout: RollingUpdate, steps: list[RolloutNode], cluster: ClusterBackend,
                     now: datetime) -> str:
    """One tick of a rolling-back rollout (see the module docstring); a word for what happened."""
    failed = ", ".join(sorted(s.node_name for s in steps if s.state == NodeState.FAILED and not rolling_back(s)))
    _announce(rollout, failed)
    for step in steps:
        if step.state == NodeState.PENDING:
            NODE_STATES.move(step, NodeState.SKIPPED, actor=ACTOR,
                             reason=f"not started: the rollout rolls back after {failed} failed (nothing on it was changed)")
        elif step.state in IN_FLIGHT and not rolling_back(step):
            _stop(step, cluster, failed)
        elif step.state == NodeState.MOVING_BACK:
            # Proven at the new config and serving: its workloads come home first (it never
            # fails), then it rolls back like any succeeded node.
            advance_move_back(step, now)
    if any(s.state == NodeState.MOVING_BACK for s in steps):
        return "finishing move-back before rolling back"
    going_back = [s for s in steps if s.state in IN_FLIGHT and rolling_back(s)]
    going_back += _begin_batch(steps, going_back, now)
    if not going_back:
        return _finish(rollout, steps, failed)
    cordon_batch(going_back, cluster)
    for step in going_back:
        advance_node(step, rollout, cluster, now)  # a failure is the node's (restored, failed); the others go on
    return f"rolling back {', '.join(s.node_name for s in going_back)}"


def _announce(rollout: RollingUpdate, failed: str) -> None:
    """Say on the rollout (and in its audit log) that it rolls back, once per run of ticks."""
    if rollout.message.startswith(ROLLING_BACK):
        return
    message = f"{ROLLING_BACK}: {failed} failed and on_failure is rollback"
    # running -> running: the status stays, the message and the audit event say what it does now.
    if transition(RollingUpdate, rollout.pk, RolloutStatus.RUNNING, RolloutStatus.RUNNING, actor=ACTOR,
                  reason=message, verb=ROLLBACK_STARTED, values={"message": message}):
        rollout.message = message


def _stop(step: RolloutNode, cluster: ClusterBackend, failed: str) -> None:
    """A node part-way through the forward change: restored as a failed node is, then rolled-back."""
    problems = restore(step, cluster)
    if problems:
        NODE_STATES.move(step, NodeState.FAILED, actor=ACTOR,
                         reason=f"stopped part-way (rollback after {failed} failed); restoring it: {'; '.join(problems)}")
        return
    NODE_STATES.move(step, NodeState.ROLLED_BACK, actor=ACTOR,
                     reason=f"stopped part-way and restored (previous labels, uncordoned): rollback after {failed} failed")


def _begin_batch(steps: list[RolloutNode], going_back: list[RolloutNode], now: datetime) -> list[RolloutNode]:
    """Start rolling back the succeeded nodes of the batch being rolled back (one a crash left
    behind), or of the latest batch when none is; those that started."""
    done = [s for s in steps if s.state == NodeState.SUCCEEDED]
    if not done:
        return []
    batch = going_back[0].batch_index if going_back else max(s.batch_index or 0 for s in done)
    started = []
    for step in done:
        if (step.batch_index or 0) != (batch or 0):
            continue
        previous = NodeConfig.of(**step.previous_config).describe() if step.previous_config else "?"
        # One UPDATE: the state and a fresh progress (the forward pass's kept under "forward").
        if NODE_STATES.move(step, NodeState.PREWARMING, actor=ACTOR,
                            reason=f"rolling back to {previous}: moving its workloads elsewhere first",
                            values={"progress": {ROLLBACK: True, "forward": step.progress}, "step_started_at": now,
                             "retry_at": None}):
            started.append(step)
    return started


def _finish(rollout: RollingUpdate, steps: list[RolloutNode], failed: str) -> str:
    not_undone = sorted(s.node_name for s in steps if rolling_back(s) and s.state != NodeState.ROLLED_BACK)
    undone = sorted(s.node_name for s in steps if s.state == NodeState.ROLLED_BACK)
    summary = f"{failed} failed; rolled back: {', '.join(undone) or 'none (nothing else had changed)'}"
    if not_undone:
        ROLLOUT_STATES.move(rollout, RolloutStatus.FAILED, actor=ACTOR,
                            reason=f"{summary}; could not roll back: {', '.join(not_undone)}")
        return "failed"
    ROLLOUT_STATES.move(rollout, RolloutStatus.ROLLED_BACK, actor=ACTOR, reason=summary)
    return "rolled back"
