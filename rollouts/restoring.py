"""Putting a node back as it was when its step stops part-way: failed, skipped, or stopped by a rollback.

``restore`` undoes what the node's step did, from what the step persisted in
``RolloutNode.progress``: the labels found before the switch go back (the device plugin restarted
on them), each replica pre-warmed for the node gives one of its two copies up again so that
nothing stays doubled, and the node is uncordoned. Every part is idempotent (a label merge, a
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
from scheduler.models import Placement
from scheduler.services.placing import release_replica

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


def _settle_copies(step: RolloutNode, cluster: ClusterBackend, problems: list[str]) -> list[int]:
    """Each replica still on the node that was pre-warmed elsewhere keeps one copy: the node's own
    while it is ready there, else the ready copy (its pod here was evicted already). Replicas the
    drain released already have only their copy left, which stays. The placements released."""
    intents: dict[str, int] = step.progress.get("intents", {})
    prewarmed: dict[str, int] = step.progress.get("prewarmed", {})
    released = []
    for old_pk in sorted(set(intents) | set(prewarmed), key=int):
        old = Placement.objects.filter(pk=int(old_pk), status__in=ACTIVE_PLACEMENTS).select_related("deployment").first()
        if old is None:
            continue
        copies = old.deployment.placements.filter(status__in=ACTIVE_PLACEMENTS)
        copy = (copies.filter(pk=prewarmed[old_pk]) if old_pk in prewarmed
                else copies.filter(replica_index=intents[old_pk])).first()
        if copy is None:
            continue
        gone = copy if _ready(cluster, old) or not _ready(cluster, copy) else old
        where = "elsewhere" if gone is copy else f"on {step.node_name}"
        try:
            release_replica(old.deployment, gone.replica_index, user=ACTOR, cluster=cluster,
                            reason=f"{step.node_name} left as it was: the copy {where} is not needed")
        except ClusterError as error:
            problems.append(f"releasing {old.deployment} replica {gone.replica_index}: {error}")
            continue
        released.append(gone.pk)
    return released


def _ready(cluster: ClusterBackend, placement: Placement) -> bool:
    try:
        return bool(placement.workload_name) and cluster.workload_ready(placement.deployment.namespace,
                                                                        placement.workload_name)
    except ClusterError:
        return False


def _with_problems(reason: str, problems: list[str]) -> str:
    return f"{reason}; restoring it: {'; '.join(problems)}" if problems else reason
