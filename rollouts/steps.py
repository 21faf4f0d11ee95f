"""One node's change, step by step (docs/design.md section 5): the reconciler calls ``advance_node`` once per tick.

pending -> prewarming (cordon, then a new replica of every gpuplane workload on the node placed
elsewhere through the placement services, waited for until ready) -> draining (every pod but
DaemonSet and mirror pods evicted through the Eviction API, a 429 backed off until ``retry_at``; the old
replicas released) -> reconfiguring (the config labels switched, the device plugin restarted) ->
verifying (inventory proves the target: the applied config from GFD labels, allocatable, and on
MIG ``mig.config.state=success``) -> uncordon -> succeeded.

The node is cordoned as pre-warming starts, not after: a cordon disturbs no running pod, and it
keeps the placement engine from choosing the very node being emptied for the new replicas.

Every step is re-entrant: what it has done is persisted in ``RolloutNode.progress`` before it
moves on (replicas pre-warmed, the labels found before the switch), and each cluster call is
idempotent (cordon, label merge, evicting what is still there), so a reconciler that dies
mid-step redoes at most the cluster call it was making. A step that fails or outlives
``ROLLOUT_STEP_TIMEOUT_S`` restores the node (``rollouts.restoring``): its previous labels, the
plugin restarted on them, the pre-warmed copies given up again where the node kept its replicas,
uncordoned; the node is then failed.

A pod marked do-not-disrupt (annotation or label ``gpuplane.io/do-not-disrupt=true``) on the node,
or a bare pod (no controller owner: an eviction would delete it for good, so ``kubectl drain``
refuses it without --force), found as pre-warming starts or before any eviction, skips the node: it
is restored the same way (nothing on it was changed) and ``skipped`` with the reason, and the
rollout goes on without it. DaemonSet and mirror pods are left where they are, as drains do.

Rolling back (``rolling_back``: ``progress["rollback"]``) is the same steps towards the node's
``previous_config`` instead of the rollout's config, ending ``rolled-back`` instead of
``succeeded``; a rollback that fails restores the node to the labels it had before the rollback's
switch (the rollout's config, proven earlier) and fails it.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from lifecycle.audit import record
from lifecycle.errors import Conflict
from nodes.cluster.base import ClusterBackend, ClusterError, ClusterNode, ClusterPod, EvictionBlocked, NotFound
from nodes.contract import (
    LABEL_DEPLOYMENT,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_MIG_CAPABLE,
    LABEL_MIG_CONFIG_STATE,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
)
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import NodeConfig, node_labels
from nodes.vocabulary import SharingMode
from rollouts.choices import IN_FLIGHT, NodeState
from rollouts.configs import publish as publish_configs
from rollouts.drain_blockers import drain_blockers, drained_pods, skip_reason
from rollouts.models import NODE_STATES, RollingUpdate, RolloutNode
from rollouts.restoring import ACTIVE_PLACEMENTS, ACTOR, fail_node, requester_of, skip_node, want_config
from scheduler.choices import MOVE_FINAL, MoveRequester, MoveStatus
from scheduler.models import Move, Placement
from scheduler.services.moving import evict, release_moves, request_move

__all__ = ["ACTOR", "IN_FLIGHT", "advance_node", "cordon_batch", "fail_node", "rolling_back", "skip_node"]

MIG_STATE_SUCCESS = "success"
MIG_STATE_FAILED = "failed"

POD_EVICTED = "rolloutnode.pod_evicted"
EVICTION_BLOCKED = "rolloutnode.eviction_blocked"
REPLICA_PREWARMED = "rolloutnode.replica_prewarmed"
LABELS_SWITCHED = "rolloutnode.labels_switched"
# progress key: this pass takes the node back to its previous_config.
ROLLBACK = "rollback"


class StepFailed(Exception):
    """The node cannot be changed now; the message says why (it becomes the node's reason)."""


class StepSkipped(Exception):
    """The node must be left as it is (a do-not-disrupt or bare pod on it); the message says why."""


def rolling_back(step: RolloutNode) -> bool:
    """True when ``step`` is being taken back to its previous config (not towards the rollout's)."""
    return bool(step.progress.get(ROLLBACK))


def advance_node(step: RolloutNode, rollout: RollingUpdate, cluster: ClusterBackend, now: datetime) -> bool:
    """Do the next piece of ``step``'s work; True when the node failed (and was restored) in this call.

    A node skipped in this call (a do-not-disrupt or bare pod) is restored too, but is no failure."""
    try:
        if step.node_id is None:
            raise StepFailed("the node left the inventory")
        if step.state in IN_FLIGHT and step.step_started_at is not None and (
                now - step.step_started_at > timedelta(seconds=settings.ROLLOUT_STEP_TIMEOUT_S)):
            raise StepFailed(f"{step.get_state_display().lower()} took longer than "
                             f"{settings.ROLLOUT_STEP_TIMEOUT_S} s")
        if step.state == NodeState.PENDING:
            if not _configs_written(step, rollout, cluster):
                return False
            NODE_STATES.move(step, NodeState.PREWARMING, actor=ACTOR, reason="moving its workloads elsewhere first",
                             values={"step_started_at": now})
        elif step.state == NodeState.PREWARMING:
            _prewarm(step, cluster, now)
        elif step.state == NodeState.DRAINING:
            _drain(step, cluster, now)
        elif step.state == NodeState.RECONFIGURING:
            _reconfigure(step, rollout, cluster, now)
        elif step.state == NodeState.VERIFYING:
            _verify(step, rollout, cluster)
    except StepSkipped as why:
        skip_node(step, cluster, str(why))
    except (StepFailed, ClusterError) as error:
        reason = f"rolling back: {error}; left at the rollout's config" if rolling_back(step) else str(error)
        fail_node(step, cluster, reason)
        return True
    return False


def cordon_batch(in_batch: list[RolloutNode], cluster: ClusterBackend) -> None:
    """Cordon every node of the batch that pre-warms before any places a replica, so that none
    places its copies on a sibling about to be drained too. A cordon that fails here is retried
    (and failed, with the node restored) by that node's own step."""
    for step in in_batch:
        if step.state == NodeState.PREWARMING:
            try:
                cluster.cordon(step.node_name)
            except ClusterError:
                continue


# ---- the steps ---------------------------------------------------------------------------------


def _configs_written(step: RolloutNode, rollout: RollingUpdate, cluster: ClusterBackend) -> bool:
    """Before a node is first touched: every config the rollout needs is in the GPU operator's
    ConfigMaps (written again if someone removed it since the start). False, the node left as it
    is and waiting with the reason, when that cannot be done now."""
    try:
        publish_configs(rollout, cluster, actor=ACTOR)
    except ClusterError as error:
        note_waiting(step, f"waiting to write the configs it needs before touching the node: {error}")
        return False
    return True


def _prewarm(step: RolloutNode, cluster: ClusterBackend, now: datetime) -> None:
    # Before a copy is placed: a node that must be skipped then has nothing to give back.
    _check_disruptable(step, _pods_on(step, cluster))
    cluster.cordon(step.node_name)
    sync_inventory(cluster)  # the placement engine reads the cordon from the inventory
    moves = _ask_for_moves(step, hold=True)
    _note_moves(step, moves)
    for move in moves:
        if move.status in MOVE_FINAL and move.status != MoveStatus.DONE:
            raise StepFailed(f"{move.deployment} could not be pre-warmed elsewhere: {move.reason}")
    waiting = [m for m in moves if m.status not in (MoveStatus.REPLACEMENT_READY, MoveStatus.DONE)]
    if waiting:
        blocked = [f"{m.deployment}: {m.blocked_reason}" for m in waiting if m.blocked_reason]
        note_waiting(step, f"waiting for {len(waiting)} pre-warmed replica(s) to become ready"
                     + (f" ({'; '.join(blocked)})" if blocked else ""))
        return
    NODE_STATES.move(step, NodeState.DRAINING, actor=ACTOR, reason=f"{len(moves)} replica(s) ready elsewhere",
                     values={"step_started_at": now})


def _drain(step: RolloutNode, cluster: ClusterBackend, now: datetime) -> None:
    pods = _pods_on(step, cluster)
    # Checked before evicting anything (such a pod may have arrived since pre-warming began).
    _check_disruptable(step, pods)
    # gpuplane's replicas leave through their moves, which evict them now (a replica placed here
    # since pre-warming began gets its move too).
    moves = _ask_for_moves(step, hold=False)
    release_moves(requester_of(step), from_node=step.node_name)
    _note_moves(step, moves)
    for move in moves:
        if move.status in MOVE_FINAL and move.status != MoveStatus.DONE:
            raise StepFailed(f"{move.deployment} could not be moved off: {move.reason}")
    moving = [m for m in moves if m.status != MoveStatus.DONE]
    if moving:
        blocked = [f"{m.deployment}: {m.blocked_reason}" for m in moving if m.blocked_reason]
        note_waiting(step, f"waiting for {len(moving)} replica(s) to be evicted"
                     + (f" ({'; '.join(blocked)})" if blocked else ""))
        return
    if step.retry_at is not None and now < step.retry_at:
        return
    # Other pods (not gpuplane's: its own leave only through their moves) are evicted directly.
    for pod in pods:
        if LABEL_DEPLOYMENT in pod.labels:
            continue
        try:
            evict(cluster, pod.namespace, pod.name)
        except NotFound:
            continue
        except EvictionBlocked as error:
            retry_at = now + timedelta(seconds=settings.ROLLOUT_EVICTION_BACKOFF_S)
            RolloutNode.objects.filter(pk=step.pk).update(retry_at=retry_at, reason=f"{pod.key}: {error}")
            step.retry_at = retry_at
            record(EVICTION_BLOCKED, step, actor=ACTOR, reason=f"{pod.key}: {error}; retrying after {retry_at:%H:%M:%S}")
            return
        record(POD_EVICTED, step, actor=ACTOR, reason=f"{pod.key} evicted through the Eviction API")
    left = [p.key for p in _pods_on(step, cluster)]
    if left:
        note_waiting(step, f"waiting for {', '.join(left)} to leave")
        return
    NODE_STATES.move(step, NodeState.RECONFIGURING, actor=ACTOR, reason="drained", values={"step_started_at": now,
                                                                                  "retry_at": None})


def _ask_for_moves(step: RolloutNode, *, hold: bool) -> list[Move]:
    """The moves of this pass off the node: one per replica on it (asked for now where missing;
    asking again is the same move). Those of an earlier pass (a rollback's) are not this pass's."""
    requester = requester_of(step)
    if "moves_from" not in step.progress:  # this pass's moves are those asked for from now on
        last = Move.objects.filter(requester=requester).order_by("-pk").values_list("pk", flat=True).first()
        save_progress(step, moves_from=(last or 0) + 1)
    since = step.progress["moves_from"]
    for old in _replicas_on(step):
        try:
            request_move(old, why=f"rollout {step.rollout_id} reconfigures {step.node_name}",
                         requested_by=MoveRequester.ROLLOUT, requester=requester,
                         timeout_s=settings.ROLLOUT_STEP_TIMEOUT_S, hold=hold)
        except Conflict:  # another operation moves it off already: the drain waits for it to leave
            continue
    return list(Move.objects.filter(requester=requester, from_node=step.node_name, pk__gte=since)
                .select_related("deployment").order_by("pk"))


def _note_moves(step: RolloutNode, moves: list[Move]) -> None:
    """Audit on the node what its moves did since last seen: a replica pre-warmed, its pod evicted."""
    prewarmed: dict[str, int] = dict(step.progress.get("prewarmed", {}))
    evicted: list[int] = list(step.progress.get("evicted", []))
    blocked: dict[str, str] = dict(step.progress.get("blocked", {}))
    changed = False
    for move in moves:
        if "(429)" in move.blocked_reason and blocked.get(str(move.pk)) != move.blocked_reason:
            blocked[str(move.pk)] = move.blocked_reason
            changed = True
            record(EVICTION_BLOCKED, step, actor=ACTOR, reason=f"{move.blocked_reason}; the mover retries (move {move.pk})")
        if move.replacement_id is not None and str(move.original_id) not in prewarmed:
            prewarmed[str(move.original_id)] = move.replacement_id
            changed = True
            new = Placement.objects.select_related("node").get(pk=move.replacement_id)
            record(REPLICA_PREWARMED, step, actor=ACTOR,
                   reason=f"{move.deployment} replica {new.replica_index} placed on {new.node.name if new.node else '?'}",
                   after={"old_placement": move.original_id, "new_placement": new.pk, "move": move.pk})
        if move.evicted_pod and move.pk not in evicted:
            evicted.append(move.pk)
            changed = True
            record(POD_EVICTED, step, actor=ACTOR,
                   reason=f"{move.evicted_pod} evicted through the Eviction API (move {move.pk})")
    if changed:
        save_progress(step, prewarmed=prewarmed, evicted=evicted, blocked=blocked)


def _reconfigure(step: RolloutNode, rollout: RollingUpdate, cluster: ClusterBackend, now: datetime) -> None:
    node = _cluster_node(cluster, step.node_name)
    target = _target(step, rollout)
    labels = node_labels(target, mig_capable=node.labels.get(LABEL_MIG_CAPABLE) == "true")
    if "previous_labels" not in step.progress:
        # Saved before the switch: a restore puts back exactly what was there (None: absent).
        save_progress(step, previous_labels={key: node.labels.get(key) for key in labels})
    want_config(step, target.as_dict(), reason=f"rollout {step.rollout_id} switches it to {target.describe()}")
    cluster.set_node_labels(step.node_name, labels)
    if labels.get(LABEL_DEVICE_PLUGIN_CONFIG) != step.progress["previous_labels"].get(LABEL_DEVICE_PLUGIN_CONFIG):
        cluster.restart_device_plugin(step.node_name)
    record(LABELS_SWITCHED, step, actor=ACTOR, reason=f"to {target.describe()}",
           before=step.progress["previous_labels"], after=dict(labels))
    NODE_STATES.move(step, NodeState.VERIFYING, actor=ACTOR, reason="waiting for the node to prove the new config",
                     values={"step_started_at": now})


def _verify(step: RolloutNode, rollout: RollingUpdate, cluster: ClusterBackend) -> None:
    target = _target(step, rollout)
    sync_inventory(cluster)
    node = _cluster_node(cluster, step.node_name)
    switched = node_labels(target, mig_capable=node.labels.get(LABEL_MIG_CAPABLE) == "true")
    if any(node.labels.get(key) != value for key, value in switched.items()):
        # No proof can come: a restore that a crash cut short put the labels back (or a hand edit
        # changed them). Failing now finishes the restore, instead of a cordon until the timeout.
        raise StepFailed(f"its config labels are no longer those of {target.describe()}")
    if target.mode == SharingMode.MIG or LABEL_MIG_CONFIG_STATE in node.labels:
        state = node.labels.get(LABEL_MIG_CONFIG_STATE)
        if state == MIG_STATE_FAILED:
            raise StepFailed("the MIG manager reports mig.config.state=failed")
        if state != MIG_STATE_SUCCESS:
            return
    row = Node.objects.get(pk=step.node_id)
    if applied_config(row) != target or not _allocatable_matches(node, target):
        return
    if not node.ready:
        # The health check: a node whose kubelet is not Ready would take no pod once uncordoned.
        note_waiting(step, "health check: waiting for the node to report Ready")
        return
    cluster.uncordon(step.node_name)
    sync_inventory(cluster)
    if rolling_back(step):
        NODE_STATES.move(step, NodeState.ROLLED_BACK, actor=ACTOR,
                         reason=f"rolled back: proven at its previous config {target.describe()} (GFD labels, allocatable), "
                         "Ready, uncordoned")
        return
    # With move_back, the workloads that left the node come home first (rollouts.move_back).
    done = NodeState.MOVING_BACK if rollout.move_back and step.progress.get("prewarmed") else NodeState.SUCCEEDED
    NODE_STATES.move(step, done, actor=ACTOR,
                     reason=f"proven at {target.describe()} (GFD labels, allocatable), Ready, uncordoned")


# ---- helpers -----------------------------------------------------------------------------------


def _target(step: RolloutNode, rollout: RollingUpdate) -> NodeConfig:
    """The rollout's config, or the node's previous one while rolling it back."""
    config = step.previous_config if rolling_back(step) else rollout.config
    if not config:
        raise StepFailed("its previous config was not recorded, so it cannot be rolled back")
    return NodeConfig.of(config["mode"], config.get("replicas"), config.get("mig_layout"))


def _pods_on(step: RolloutNode, cluster: ClusterBackend) -> list[ClusterPod]:
    """The node's GPU pods a drain evicts (``rollouts.drain_blockers.drained_pods``)."""
    return drained_pods(cluster.list_gpu_pods(), step.node_name)


def _check_disruptable(step: RolloutNode, pods: list[ClusterPod]) -> None:
    """StepSkipped when a pod on the node blocks its drain (``rollouts.drain_blockers``): one marked
    do-not-disrupt, or a bare pod; the node then stays as it is."""
    left = "left at the rollout's config" if rolling_back(step) else "nothing on it was changed"
    reason = skip_reason(drain_blockers(pods), left)
    if reason:
        raise StepSkipped(reason)


def _allocatable_matches(node: ClusterNode, target: NodeConfig) -> bool:
    """The restarted device plugin advertises the target: whole-GPU modes GPUs x R ``nvidia.com/gpu``;
    MIG (mixed strategy, the layout on every GPU) each profile's count x GPUs. The MIG manager reports
    ``success`` before the plugin it restarts is back, so the state label alone proves too little."""
    if target.mode == SharingMode.MIG:
        return all(node.allocatable.get(f"{RESOURCE_MIG_PREFIX}{profile}") == count * len(node.gpus)
                   for profile, count in target.mig_layout or ())
    return node.allocatable.get(RESOURCE_GPU) == len(node.gpus) * (target.replicas or 1)


def _replicas_on(step: RolloutNode) -> list[Placement]:
    return list(Placement.objects.filter(node_id=step.node_id, status__in=ACTIVE_PLACEMENTS)
                .select_related("deployment").order_by("pk"))


def _cluster_node(cluster: ClusterBackend, name: str) -> ClusterNode:
    for node in cluster.list_nodes():
        if node.name == name:
            return node
    raise StepFailed("the node is gone from the cluster")


def save_progress(step: RolloutNode, **changes: Any) -> None:
    step.progress = {**step.progress, **changes}
    RolloutNode.objects.filter(pk=step.pk).update(progress=step.progress)


def note_waiting(step: RolloutNode, reason: str) -> None:
    """What the node waits for, shown on the rollout page (not an audit event: nothing changed)."""
    if step.reason != reason:
        RolloutNode.objects.filter(pk=step.pk).update(reason=reason)
        step.reason = reason
