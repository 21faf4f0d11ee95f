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
from nodes.cluster.base import ClusterBackend, ClusterError, ClusterNode, ClusterPod, EvictionBlocked, NotFound
from nodes.contract import (
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
from rollouts.restoring import ACTIVE_PLACEMENTS, ACTOR, fail_node, skip_node, want_config
from scheduler.models import Placement
from scheduler.services.errors import NoCapacity
from scheduler.services.placing import release_replica
from scheduler.services.replacing import give_back_half_placed, is_ready, place_replacement, replacement_index

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
    prewarmed: dict[str, int] = dict(step.progress.get("prewarmed", {}))
    for old in _replicas_on(step):
        if str(old.pk) in prewarmed:
            continue
        deployment = old.deployment
        index = replica_index_for(step, old)
        if give_back_half_placed(deployment, index, cluster=cluster, user=ACTOR,
                                 reason="reserved by a rollout step that died before its workload was created"):
            index = replica_index_for(step, old)  # that index is spent now: a fresh one
        try:  # adopts the copy a run that died placed before it could note it
            new = place_replacement(deployment, index, cluster=cluster, user=ACTOR)
        except NoCapacity as error:
            # Capacity may free up: wait, within the step's timeout.
            note_waiting(step, f"waiting for room to pre-warm {deployment}: {error}")
            return
        prewarmed[str(old.pk)] = new.pk
        save_progress(step, prewarmed=prewarmed)
        record(REPLICA_PREWARMED, step, actor=ACTOR,
               reason=f"{deployment} replica {new.replica_index} placed on {new.node.name if new.node else '?'}",
               after={"old_placement": old.pk, "new_placement": new.pk})
    waiting = [p for p in Placement.objects.filter(pk__in=prewarmed.values()).select_related("deployment")
               if not is_ready(p, cluster)]
    if waiting:
        note_waiting(step, f"waiting for {len(waiting)} pre-warmed replica(s) to become ready")
        return
    NODE_STATES.move(step, NodeState.DRAINING, actor=ACTOR, reason=f"{len(prewarmed)} replica(s) ready elsewhere",
                     values={"step_started_at": now})


def _drain(step: RolloutNode, cluster: ClusterBackend, now: datetime) -> None:
    if step.retry_at is not None and now < step.retry_at:
        return
    pods = _pods_on(step, cluster)
    # Checked before evicting anything (such a pod may have arrived since pre-warming began).
    _check_disruptable(step, pods)
    for pod in pods:
        try:
            cluster.evict_pod(pod.namespace, pod.name)
        except NotFound:
            continue
        except EvictionBlocked as error:
            retry_at = now + timedelta(seconds=settings.ROLLOUT_EVICTION_BACKOFF_S)
            RolloutNode.objects.filter(pk=step.pk).update(retry_at=retry_at, reason=f"{pod.key}: {error}")
            step.retry_at = retry_at
            record(EVICTION_BLOCKED, step, actor=ACTOR, reason=f"{pod.key}: {error}; retrying after {retry_at:%H:%M:%S}")
            return
        record(POD_EVICTED, step, actor=ACTOR, reason=f"{pod.key} evicted through the Eviction API")
    # The evicted pods' workloads are pinned to this node: release them, or their ReplicaSets
    # recreate the pods here.
    for old in _replicas_on(step):
        release_replica(old.deployment, old.replica_index, user=ACTOR, cluster=cluster,
                        reason=f"moved off {step.node_name} for rollout {step.rollout_id}")
    left = [p.key for p in _pods_on(step, cluster)]
    if left:
        note_waiting(step, f"waiting for {', '.join(left)} to leave")
        return
    NODE_STATES.move(step, NodeState.RECONFIGURING, actor=ACTOR, reason="drained", values={"step_started_at": now,
                                                                                  "retry_at": None})


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


def replica_index_for(step: RolloutNode, old: Placement) -> int:
    """The replica index the copy of ``old`` gets, chosen once and persisted before placing it, so
    a run that dies between placing and noting the copy finds it again instead of placing another."""
    intents: dict[str, int] = dict(step.progress.get("intents", {}))
    chosen = intents.get(str(old.pk))
    index = replacement_index(old.deployment, chosen)
    if index != chosen:
        intents[str(old.pk)] = index
        save_progress(step, intents=intents)
    return index


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
