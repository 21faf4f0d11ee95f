"""Putting a node back as it was when its step stops part-way: failed, skipped, or stopped by a rollback.

``restore`` undoes what the node's step did, from what the step persisted in
``RolloutNode.progress``: the labels found before the switch go back (the device plugin restarted
on them), the node's moves still in flight are given up (``scheduler.services.moving.cancel_moves``:
each replacement released, the original kept) so that nothing stays doubled, and the node is
uncordoned. Every part is idempotent (a label merge, a
release of what is still active, an uncordon), so a restore cut short by a crash is simply
redone; what could not be undone is returned, to be added to the node's reason.

``fail_node`` and ``skip_node`` restore, then move the node to ``failed`` / ``skipped``.
"""
from __future__ import annotations

from typing import Any

from lifecycle.audit import record
from nodes.cluster.base import ClusterBackend, ClusterError
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.node_configs import set_desired_config
from nodes.sharing.node_config import InvalidNodeConfig
from rollouts.choices import NodeState
from rollouts.models import NODE_STATES, RolloutNode
from scheduler.choices import PlacementStatus
from scheduler.services.moving import cancel_moves

ACTOR = "system:rollouts"
ACTIVE_PLACEMENTS = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)

NODE_RESTORED = "rolloutnode.restored"


def fail_node(step: RolloutNode, cluster: ClusterBackend, reason: str) -> None:
    """Restore the node (best effort: what could not be undone is added to the reason), then fail it."""
    NODE_STATES.move(step, NodeState.FAILED, actor=ACTOR, reason=_with_problems(reason, restore(step, cluster)))


def skip_node(step: RolloutNode, cluster: ClusterBackend, reason: str) -> None:
    """Restore the node (its labels were never switched: uncordon it, give the copies up), then skip it."""
    NODE_STATES.move(step, NodeState.SKIPPED, actor=ACTOR, reason=_with_problems(reason, restore(step, cluster)))


def want_config(step: RolloutNode, config: dict[str, Any] | None, *, reason: str) -> None:
    """Make ``config`` the node's desired config (audited; the node page shows it pending until
    applied). A config the node's model refuses is left out: the rollout validated it already."""
    node = Node.objects.filter(pk=step.node_id).first()
    if node is None or config is None:
        return
    try:
        set_desired_config(node, config, actor=ACTOR, reason=reason)
    except InvalidNodeConfig:
        return


def restore(step: RolloutNode, cluster: ClusterBackend) -> list[str]:
    """Put the labels found before the switch back, restart the plugin on them, give up the
    doubled replicas, uncordon; the problems met."""
    problems: list[str] = []
    previous = step.progress.get("previous_labels")
    if previous is not None:
        try:
            cluster.set_node_labels(step.node_name, previous)
            cluster.restart_device_plugin(step.node_name)
        except ClusterError as error:
            problems.append(str(error))
        # The node is back at the config this pass started from: that is what gpuplane wants of it.
        origin = step.rollout.config if step.progress.get("rollback") else step.previous_config
        want_config(step, origin, reason=f"restored by rollout {step.rollout_id}")
    released = _settle_copies(step, cluster, problems)
    try:
        cluster.uncordon(step.node_name)
        sync_inventory(cluster)  # the placement engine and the node pages read the cordon from the inventory
    except ClusterError as error:
        problems.append(str(error))
    record(NODE_RESTORED, step, actor=ACTOR, reason="previous labels restored, node uncordoned",
           after={"labels": previous, "released": released, "problems": problems})
    return problems


def requester_of(step: RolloutNode) -> str:
    """What the moves of the step's rollout name as the operation that asked for them: the rollout
    (one operation, so the workload's minimum disruption interval does not apply between its nodes'
    moves: its batches and the PDBs pace them). A step's own moves are those off its node (pre-warm,
    drain) and onto it (move-back)."""
    return f"rollout:{step.rollout_id}"


def _settle_copies(step: RolloutNode, cluster: ClusterBackend, problems: list[str]) -> list[int]:
    """Give up the node's moves still in flight (the mover releases each replacement; the original
    stays on the node). A move past its eviction finishes as the mover carries it on: that replica
    has only its copy left, which stays. The replacements released."""
    try:
        cancelled = cancel_moves(requester_of(step), node=step.node_name, cluster=cluster,
                                 reason=f"{step.node_name} left as it was: the copy is not needed")
    except ClusterError as error:
        problems.append(f"giving up the node's moves: {error}")
        return []
    return [m.replacement_id for m in cancelled if m.replacement_id is not None]


def _with_problems(reason: str, problems: list[str]) -> str:
    return f"{reason}; restoring it: {'; '.join(problems)}" if problems else reason
