"""The mover: the one executor of every move of a replica (docs/design.md section 5a).

Rollouts, consolidation, preemption and scale-down never remove a replica themselves: they call
``request_move`` and read the ``Move``'s outcome. ``advance_moves`` (one Celery task, beat) takes
every move one step further, replacement first, each step a ``MOVE_STATES`` transition (a
conditional UPDATE and an audit event ``move.<status>``):

1. planned: once no budget holds it back (``scheduler.services.disruption``: do-not-disrupt,
   concurrent disruptions, the workload's minimum interval), the replacement's replica index is
   chosen and persisted, then the replacement is placed through the placement engine (on
   ``to_node``, or anywhere but the node it leaves) -> replacement_placed;
2. replacement_placed: its workload ready -> replacement_ready;
3. replacement_ready: the original's pod is evicted through the Eviction API only
   (``ClusterBackend.evict_pod``); a 429 (a PodDisruptionBudget) or a budget keeps the move
   waiting here with ``blocked_reason`` said, retried next tick -> original_evicting;
4. original_evicting: the original's placement is released (its workload shrunk, so its
   ReplicaSet does not bring the evicted pod back on the old node); once the replacement is ready
   -> done.

Every step is idempotent: the replica index is persisted before placing (a tick that died after
placing adopts the replacement, one that died after only reserving gives it back and the index
is spent), an eviction of a pod already gone is a success, a release of a released replica does
nothing. Whatever happens, a deployment keeps exactly its replicas: a move given up before the
eviction releases its replacement and ends rolled_back (the original serves on); past ``timeout_s``
(from the first tick) the same. A move whose replacement is not ready after the original was
evicted, or is gone, fails loudly: the replacement given back, the move ``lost``, the deployment's
message and an audit event ``deployment.replica_lost`` say so.

A **removal** (``kind`` removal, ``request_removal``: a scale-down's or a preemption's victim)
has no replacement: planned -> original_evicting (step 3, under the same budgets and PDBs; a
scale-down asked for by the workload's owner skips the per-workload interval, see
``disruption``) -> done once its placement is released (step 4). Given up before the eviction it
ends rolled_back, the replica serving on; a scale-down's then gives its replica back to the
deployment's target (``replicas`` + 1, audited), so active placements = replicas still holds.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from lifecycle.audit import record
from lifecycle.errors import Conflict
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError, EvictionBlocked, NotFound
from nodes.models import Node
from scheduler.choices import MOVE_IN_FLIGHT, MoveKind, MoveRequester, MoveStatus, PlacementStatus
from scheduler.models import MOVE_STATES, Deployment, Move, Placement
from scheduler.services.disruption import evict_blocker, original_pods, pdb_reason, start_blocker
from scheduler.services.errors import DeployFailed, NoCapacity
from scheduler.services.placing import next_replica_index, place_replicas
from scheduler.services.releasing import ACTIVE_PLACEMENT, release_replica
from scheduler.services.spec import spec_of

S = MoveStatus
ACTOR = "mover"
MOVER_LOCK = "gpuplane:moves:advance:lock"  # whoever advances moves holds it (tick_lock): one at a time
BLOCKED = "move.blocked"
REPLICA_LOST = "deployment.replica_lost"


def describe_partition(placement: Placement) -> str:
    """What a placement holds, for the move's from/to columns: "mig 3g.40gb on GPU 0"."""
    kind = placement.mig_profile or placement.sharing or "default scheduler"
    gpus = ",".join(str(i) for i in placement.gpu_indexes or [])
    return f"{kind} on GPU {gpus}" if gpus else kind


def request_move(original: Placement, *, why: str, requested_by: str, requester: str, to_node: str = "",
                 timeout_s: int | None = None, hold: bool = False, actor: Any = None,
                 kind: str = MoveKind.MOVE) -> Move:
    """The move of replica ``original`` asked for by ``requester``: the one it asked for before
    while in flight (asking twice is safe), else a new planned one. With ``hold`` the move stops
    at replacement_ready until the requester calls ``release_moves`` (a rollout pre-warms every
    replica of a node, then drains it); while held its timeout is the requester's to keep.

    Conflict (409) when the replica is not active, or another operation moves it already."""
    current = Move.objects.filter(original=original, status__in=MOVE_IN_FLIGHT).first()
    if current is not None:
        if current.requester == requester:
            return current
        raise Conflict(f"{original.deployment} replica {original.replica_index} is being moved already "
                       f"(move {current.pk}, for {current.requester})")
    if original.status not in ACTIVE_PLACEMENT or (original.node_id is None and kind == MoveKind.MOVE):
        raise Conflict(f"{original.deployment} replica {original.replica_index} is {original.status} "
                       "or not on a node gpuplane placed: nothing to move")
    move = Move.objects.create(
        deployment=original.deployment, kind=kind, original=original, from_node=original.node.name if original.node else "",
        from_partition=describe_partition(original), to_node=to_node, why=why, requested_by=requested_by,
        requester=requester, timeout_s=timeout_s or settings.MOVE_TIMEOUT_S, hold=hold, reason="waiting for the mover")
    record("move.planned", move, actor=actor or requester, reason=why,
           after={"kind": kind, "deployment": move.deployment_id, "original": original.pk,
                  "from_node": move.from_node, "to_node": to_node})
    return move


def request_removal(original: Placement, *, why: str, requested_by: str, requester: str,
                    timeout_s: int | None = None, actor: Any = None) -> Move:
    """The removal of replica ``original`` (evicted, never replaced), as ``request_move`` asks for a move."""
    return request_move(original, why=why, requested_by=requested_by, requester=requester, timeout_s=timeout_s,
                        actor=actor, kind=MoveKind.REMOVAL)


def cancel_move(move: Move, *, reason: str, cluster: ClusterBackend | None = None) -> bool:
    """Give up ``move`` before its original is evicted (its replacement released): rolled_back.
    False when it is past that point (it then ends as the mover carries it on)."""
    backend = cluster if cluster is not None else get_cluster()
    move.refresh_from_db()
    if move.status not in MOVE_STATES.sources(S.ROLLED_BACK):
        return False
    return _roll_back(move, backend, reason, requester=True)


def release_moves(requester: str, *, from_node: str) -> int:
    """Let ``requester``'s held moves off ``from_node`` evict their originals; how many."""
    held = list(Move.objects.filter(requester=requester, from_node=from_node, hold=True, status__in=MOVE_IN_FLIGHT))
    for move in held:
        if Move.objects.filter(pk=move.pk, hold=True).update(hold=False, updated_at=timezone.now()):
            record("move.released", move, actor=requester, reason="the requester lets the original go now")
    return len(held)


def cancel_moves(requester: str, *, reason: str, node: str | None = None,
                 cluster: ClusterBackend | None = None) -> list[Move]:
    """``cancel_move`` every move of ``requester`` still in flight (with ``node``: only those off
    or onto it); those rolled back."""
    moves = Move.objects.filter(requester=requester, status__in=MOVE_IN_FLIGHT).select_related("deployment")
    if node is not None:
        moves = moves.filter(Q(from_node=node) | Q(to_node=node))
    return [move for move in moves.order_by("pk") if cancel_move(move, reason=reason, cluster=cluster)]


def evict(cluster: ClusterBackend, namespace: str, name: str) -> None:
    """Evict a pod no move is for (a drain's: another team's pod), through the Eviction API only:
    the one door, beside the moves, by which gpuplane removes a pod. EvictionBlocked on a 429."""
    cluster.evict_pod(namespace, name)


def advance_moves(*, cluster: ClusterBackend | None = None, now: datetime | None = None,
                  requester: str | None = None) -> dict[str, int]:
    """One tick: take every move in flight (only ``requester``'s, with it) one step further; how
    many ended in each final state. A ClusterError leaves that move for the next tick."""
    backend = cluster if cluster is not None else get_cluster()
    moment = now or timezone.now()
    moves = Move.objects.filter(status__in=MOVE_IN_FLIGHT).select_related("deployment", "original", "original__node")
    if requester is not None:
        moves = moves.filter(requester=requester)
    counts = {S.DONE: 0, S.FAILED: 0, S.ROLLED_BACK: 0}
    for move in moves.order_by("pk"):
        try:
            advance_move(move, backend, moment)
        except ClusterError as error:  # every step is safe to repeat: the next tick retries
            _block(move, f"the cluster failed: {error}")
        if move.status in counts:
            counts[move.status] += 1
    return {str(k): v for k, v in counts.items()}


def advance_move(move: Move, cluster: ClusterBackend, now: datetime) -> None:
    """Take ``move`` one step further (see the module docstring)."""
    if move.started_at is None:
        move.started_at = now
        Move.objects.filter(pk=move.pk).update(started_at=now)
    timed_out = now - move.started_at > timedelta(seconds=move.timeout_s)
    if move.status == S.ORIGINAL_EVICTING:
        _finish(move, cluster, now)
        return
    removal = move.kind == MoveKind.REMOVAL
    if move.original.status not in ACTIVE_PLACEMENT:
        if removal:  # what it was to take away is gone already: nothing to evict, its end is reached
            _evicted(move, cluster, now, "its replica was released already; nothing evicted")
            return
        _roll_back(move, cluster, "its original replica is gone (released elsewhere); nothing evicted", now)
        return
    if timed_out and not move.hold:
        if move.status == S.REPLACEMENT_PLACED:
            what = f"its replacement was not ready in time ({move.timeout_s} s)"
        else:
            what = f"not done within {move.timeout_s} s" + (f" ({move.blocked_reason})" if move.blocked_reason else "")
        _roll_back(move, cluster, f"{what}; the original stays", now)
        return
    if move.status == S.PLANNED:
        (_evict if removal else _place)(move, cluster, now)
    elif move.status == S.REPLACEMENT_PLACED:
        _await_ready(move, cluster, now)
    elif move.status == S.REPLACEMENT_READY:
        _evict(move, cluster, now)


# ---- the steps ---------------------------------------------------------------------------------


def _place(move: Move, cluster: ClusterBackend, now: datetime) -> None:
    blocker = start_blocker(move, cluster, now)
    if blocker:
        _block(move, blocker)
        return
    deployment = move.deployment
    index = _replacement_index(move, cluster)
    try:
        replacement = _place_replacement(move, deployment, index, cluster)
    except (NoCapacity, DeployFailed, ValueError) as error:
        if move.to_node:  # that very node: it will not get more room by waiting
            _roll_back(move, cluster, f"does not fit {move.to_node} now: {error}; nothing evicted", now)
        else:
            _block(move, f"waiting for room for the replacement: {error}")
        return
    node = replacement.node.name if replacement.node else ""
    MOVE_STATES.move(move, S.REPLACEMENT_PLACED, actor=ACTOR,
                     reason=f"replacement (replica {replacement.replica_index}) placed on {node or 'the default scheduler'}",
                     values={"replacement": replacement, "placed_at": now, "blocked_reason": "",
                             "to_partition": describe_partition(replacement), "to_node": move.to_node or node})
    _await_ready(move, cluster, now)


def _await_ready(move: Move, cluster: ClusterBackend, now: datetime) -> None:
    replacement = _replacement(move)
    if replacement is None or replacement.status not in ACTIVE_PLACEMENT:
        _roll_back(move, cluster, "its replacement did not start; the original stays", now)
        return
    if not _is_ready(replacement, cluster):
        return
    MOVE_STATES.move(move, S.REPLACEMENT_READY, actor=ACTOR, reason="replacement ready",
                     values={"ready_at": now})
    _evict(move, cluster, now)


def _evict(move: Move, cluster: ClusterBackend, now: datetime) -> None:
    if move.hold:
        _block(move, f"held by {move.requester} until it lets the original go (its drain)")
        return
    blocker = evict_blocker(move, cluster, now)
    if blocker:
        _block(move, blocker)
        return
    evicted = ""
    for pod in original_pods(move, cluster.list_gpu_pods()):
        try:
            cluster.evict_pod(pod.namespace, pod.name)
        except NotFound:
            continue
        except EvictionBlocked as error:
            _block(move, pdb_reason(pod, cluster, str(error)))
            return
        evicted = pod.key
        break  # one pod is this replica: the workload's other pods are other replicas
    _evicted(move, cluster, now, f"{evicted} evicted through the Eviction API" if evicted
             else "the original's pod was gone already", evicted)


def _evicted(move: Move, cluster: ClusterBackend, now: datetime, reason: str, pod: str = "") -> None:
    MOVE_STATES.move(move, S.ORIGINAL_EVICTING, actor=ACTOR, reason=reason,
                     values={"evicted_pod": pod, "evicted_at": now, "blocked_reason": ""})
    _finish(move, cluster, now)


def _finish(move: Move, cluster: ClusterBackend, now: datetime) -> None:
    original = move.original
    # The pod is gone; the workload shrinks so that its ReplicaSet does not recreate it on the node.
    removal = move.kind == MoveKind.REMOVAL
    release_replica(original.deployment, original.replica_index, user=ACTOR, cluster=cluster,
                    reason=f"{'removed from' if removal else 'moved off'} {move.from_node} ({move.kind} {move.pk}, "
                           f"{move.requester}): {move.why}")
    if removal:
        MOVE_STATES.move(move, S.DONE, actor=ACTOR, reason=f"removed from {move.from_node}, not replaced ({move.why})",
                         values={"blocked_reason": "", "finished_at": now})
        return
    replacement = _replacement(move)
    if replacement is not None and replacement.status in ACTIVE_PLACEMENT and _is_ready(replacement, cluster):
        MOVE_STATES.move(move, S.DONE, actor=ACTOR,
                         reason=f"ready on {move.to_node or 'its new node'}; the original on {move.from_node} evicted",
                         values={"blocked_reason": "", "finished_at": now})
        return
    evicted_at = move.evicted_at or now
    gone = replacement is None or replacement.status not in ACTIVE_PLACEMENT
    if not gone and now - evicted_at <= timedelta(seconds=move.timeout_s):
        return
    _lose(move, cluster, "its replacement is gone" if gone else f"its replacement was not ready within {move.timeout_s} s",
          now)


# ---- ends --------------------------------------------------------------------------------------


def _roll_back(move: Move, cluster: ClusterBackend, reason: str, now: datetime | None = None, *,
               requester: bool = False) -> bool:
    """Give the replacement back (if any) and end ``move`` rolled_back; the original serves on."""
    # The persisted index is this move's alone: whatever holds it (placed by a tick that died before
    # noting it, too) is the replacement.
    if move.replacement_index is not None:
        release_replica(move.deployment, move.replacement_index, user=ACTOR, cluster=cluster,
                        reason=f"move {move.pk} rolled back: {reason}")
    # A scale-down's removal given up: its replica serves on, so the target takes it back, in the
    # transaction that ends the move and under the deployment's row (scale_deployment's count).
    restore = move.kind == MoveKind.REMOVAL and move.requested_by == MoveRequester.SCALE_DOWN
    with transaction.atomic():
        row = Deployment.objects.select_for_update().filter(pk=move.deployment_id).first() if restore else None
        ended = MOVE_STATES.move(move, S.ROLLED_BACK, actor=move.requester if requester else ACTOR, reason=reason,
                                 values={"blocked_reason": "", "finished_at": now or timezone.now()})
        if ended and row is not None:
            Deployment.objects.filter(pk=row.pk).update(replicas=F("replicas") + 1, updated_at=timezone.now())
            record("deployment.scaled", row, actor=ACTOR, reason=f"removal {move.pk} given up ({reason}): its replica "
                   "serves on and counts again", before={"replicas": row.replicas}, after={"replicas": row.replicas + 1})
    return ended


def _lose(move: Move, cluster: ClusterBackend, what: str, now: datetime) -> None:
    """Fail ``move`` loudly: the original was evicted and the replica did not come back."""
    replacement = _replacement(move)
    if replacement is not None:
        release_replica(replacement.deployment, replacement.replica_index, user=ACTOR, cluster=cluster,
                        reason=f"move {move.pk} failed: {what}")
    reason = f"replica lost: the original on {move.from_node} was evicted and {what}"
    if not MOVE_STATES.move(move, S.FAILED, actor=ACTOR, reason=reason, values={"lost": True, "blocked_reason": "", "finished_at": now}):
        return
    message = f"a replica was lost while moving off {move.from_node} (move {move.pk}): {what}"
    Deployment.objects.filter(pk=move.deployment_id).update(message=message, updated_at=timezone.now())
    record(REPLICA_LOST, move.deployment, actor=ACTOR, reason=message, after={"move": move.pk})


def _block(move: Move, reason: str) -> None:
    """Say what holds ``move`` back (an audit event when that changes; nothing else moves)."""
    if move.blocked_reason == reason:
        return
    Move.objects.filter(pk=move.pk).update(blocked_reason=reason, updated_at=timezone.now())
    move.blocked_reason = reason
    record(BLOCKED, move, actor=ACTOR, reason=reason)


# ---- replacement bookkeeping -------------------------------------------------------------------


def _replacement(move: Move) -> Placement | None:
    if move.replacement_id is None:
        return None
    return Placement.objects.select_related("deployment", "node").filter(pk=move.replacement_id).first()


def _is_ready(placement: Placement, cluster: ClusterBackend) -> bool:
    return bool(placement.workload_name
                and cluster.workload_ready(placement.deployment.namespace, placement.workload_name))


def _give_back_reserved(move: Move, cluster: ClusterBackend) -> None:
    """Release the replica at the move's persisted index if a tick that died left it reserved
    (placing moves a replica on from RESERVED once its workload exists and ticks never overlap,
    so a reserved one seen here has no workload); an active one with a workload is adopted."""
    index = move.replacement_index
    if index is None:
        return
    reserved = move.deployment.placements.filter(replica_index=index, status=PlacementStatus.RESERVED).exists()
    if reserved:
        release_replica(move.deployment, index, user=ACTOR, cluster=cluster,
                        reason=f"reserved by a tick of move {move.pk} that died before its workload was created")


def _replacement_index(move: Move, cluster: ClusterBackend) -> int:
    """The replica index the replacement is placed under, persisted before placing: the one chosen
    before while its attempt may be adopted, else (none yet, or spent) a fresh one no placement
    and no other move in flight has."""
    _give_back_reserved(move, cluster)
    chosen = move.replacement_index
    deployment = move.deployment
    if chosen is not None and not deployment.placements.filter(replica_index=chosen).exclude(
            status__in=ACTIVE_PLACEMENT).exists():
        return chosen
    taken = Move.objects.filter(deployment=deployment, status__in=MOVE_IN_FLIGHT,
                                replacement_index__isnull=False).exclude(pk=move.pk)
    index = max([next_replica_index(deployment), *(m.replacement_index + 1 for m in taken
                                                    if m.replacement_index is not None)])
    Move.objects.filter(pk=move.pk).update(replacement_index=index)
    move.replacement_index = index
    return index


def _place_replacement(move: Move, deployment: Deployment, index: int, cluster: ClusterBackend) -> Placement:
    """The active replica ``index``: the one a tick that died placed (adopted), else placed now
    on ``to_node`` only (never handed to the default scheduler: the point is that node), or on
    any node but the one it leaves."""
    placed = deployment.placements.filter(replica_index=index, status__in=ACTIVE_PLACEMENT).first()
    if placed is not None:
        return placed
    if move.to_node:
        spec = replace(spec_of(deployment), allow_default_scheduler=False)
        return place_replicas(deployment, [index], spec=spec, user=ACTOR, cluster=cluster, nodes=[move.to_node])[0]
    others = list(Node.objects.exclude(name=move.from_node).values_list("name", flat=True))
    return place_replicas(deployment, [index], user=ACTOR, cluster=cluster, nodes=others)[0]
