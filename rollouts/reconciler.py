"""The rollout reconciler: each tick moves every running rollout one step on (Celery beat calls ``reconcile``).

A rollout works through its batches in order: a batch's nodes advance together (at most
``max_unavailable`` of them, as planned), and the next batch starts only when each of them is
done. A node holding a do-not-disrupt pod is skipped with the reason (restored, untouched) and
the others go on. A node that fails is restored by its step (``rollouts.steps``); the rollout
then follows ``on_failure``: ``pause`` stops it with the reason (resuming goes on with the other
nodes, the failed one staying failed); ``rollback`` takes every node it changed back to its
previous config, the same safe way, and ends ``rolled-back`` (``rollouts.rollback``). A rollout
whose nodes are all done ends ``succeeded``, or ``failed`` when some node failed.

The state lives in the rows only, so ticks are safe to repeat, and a tick that died mid-way is
picked up by the next one.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend
from rollouts.blue_green import hold_for_pool
from rollouts.choices import NodeState, OnFailure, RolloutStatus, RolloutStrategy
from rollouts.expiry import expire_unstarted
from rollouts.models import ROLLOUT_STATES, RollingUpdate, RolloutNode
from rollouts.move_back import advance_move_back
from rollouts.rollback import advance_rollback, rolls_back
from rollouts.steps import ACTOR, IN_FLIGHT, advance_node, cordon_batch, fail_node
from rollouts.windows import hold_outside_window

logger = logging.getLogger(__name__)

PAUSED_FOR_IT = "paused_for_it"  # RolloutNode.progress: the rollout has paused for this failure

FINISHED_NODES = (NodeState.SUCCEEDED, NodeState.SKIPPED, NodeState.FAILED, NodeState.ROLLED_BACK)


def reconcile(*, cluster: ClusterBackend | None = None, now: datetime | None = None) -> dict[str, Any]:
    """Expire pending rollouts past their ``start_by``, then advance every running rollout by one
    step; what each did, by id."""
    backend = cluster if cluster is not None else get_cluster()
    when = now or timezone.now()
    done: dict[str, Any] = {str(pk): "expired" for pk in expire_unstarted(when)}
    for rollout in RollingUpdate.objects.filter(status=RolloutStatus.RUNNING).order_by("pk"):
        try:
            done[str(rollout.pk)] = advance_rollout(rollout, backend, when)
        except Exception as error:  # a bug or an outage in one rollout must not stall the others
            logger.exception("rollout %s: tick failed; the next tick retries the same step", rollout.pk)
            done[str(rollout.pk)] = f"error: {error}"
    return done


def advance_rollout(rollout: RollingUpdate, cluster: ClusterBackend, now: datetime) -> str:
    """One tick of one rollout; a word for what happened."""
    steps = list(RolloutNode.objects.filter(rollout=rollout).order_by("batch_index", "node_name"))
    if rolls_back(rollout, steps):
        return advance_rollback(rollout, steps, cluster, now)
    if _pause_for_failures(rollout):  # a tick that died between failing a node and pausing
        return "node failed"
    open_steps = [s for s in steps if s.state not in FINISHED_NODES]
    if not open_steps:
        return _finish(rollout, steps)
    batch = min(s.batch_index or 0 for s in open_steps)
    in_batch = [s for s in open_steps if (s.batch_index or 0) == batch]
    cordon_batch(in_batch, cluster)
    # Which nodes may move on this tick: the maintenance window and blue-green's phases decide.
    runnable = hold_outside_window(rollout, in_batch, now)
    if rollout.strategy == RolloutStrategy.BLUE_GREEN:
        runnable = hold_for_pool(runnable, in_batch, now)
    for step in runnable:
        if step.state == NodeState.MOVING_BACK:
            advance_move_back(step, now)  # never fails the node: its config is proven
        elif advance_node(step, rollout, cluster, now):
            if rollout.on_failure == OnFailure.ROLLBACK:
                return "node failed: rolling back"  # from the next tick on (``rolls_back``)
            _pause_for_failures(rollout)
            return "node failed"
    return f"batch {batch}"


def _pause_for_failures(rollout: RollingUpdate) -> bool:
    """With ``on_failure: pause``, pause for the failed nodes no pause has answered yet; whether it paused.

    The pause and the mark on each node it answers are one transaction, so a worker killed after
    a node failed but before the pause leaves the pause to the next tick, and a resumed rollout
    does not pause again for the same node.
    """
    if rollout.on_failure != OnFailure.PAUSE:
        return False
    with transaction.atomic():
        failed = [s for s in RolloutNode.objects.select_for_update().filter(rollout=rollout, state=NodeState.FAILED)
                  .order_by("node_name") if not s.progress.get(PAUSED_FOR_IT)]
        if not failed:
            return False
        reason = "; ".join(f"{s.node_name} failed: {s.reason}" for s in failed)
        if not ROLLOUT_STATES.move(rollout, RolloutStatus.PAUSED, actor=ACTOR, reason=reason):
            return False
        for step in failed:
            RolloutNode.objects.filter(pk=step.pk).update(progress={**step.progress, PAUSED_FOR_IT: True})
    return True


def _finish(rollout: RollingUpdate, steps: list[RolloutNode]) -> str:
    failed = sorted(s.node_name for s in steps if s.state == NodeState.FAILED)
    if failed:
        ROLLOUT_STATES.move(rollout, RolloutStatus.FAILED, actor=ACTOR, reason=f"finished; failed: {', '.join(failed)}")
        return "failed"
    skipped = sorted(s.node_name for s in steps if s.state == NodeState.SKIPPED)
    reason = "every node proven at the new config"
    if skipped:
        reason = f"every other node proven at the new config; skipped (see each reason): {', '.join(skipped)}"
    ROLLOUT_STATES.move(rollout, RolloutStatus.SUCCEEDED, actor=ACTOR, reason=reason)
    return "succeeded"


def restore_in_flight(rollout: RollingUpdate, cluster: ClusterBackend, reason: str) -> list[str]:
    """Fail (restoring each) the nodes ``rollout`` has part-way changed; their names."""
    names = []
    for step in RolloutNode.objects.filter(rollout=rollout, state__in=IN_FLIGHT).order_by("node_name"):
        fail_node(step, cluster, reason)
        names.append(step.node_name)
    return names
