"""Moving workloads back onto a node once it is proven (``RollingUpdate.move_back``).

With ``move_back``, a node proven at its new config and uncordoned goes from ``verifying`` to
``moving-back`` (not ``succeeded``) when workloads left it: ``progress["prewarmed"]`` maps each
replica that was on it to its copy elsewhere. For each copy still running, the reconciler asks
the mover (``scheduler.services.moving``) for a move onto this node, then reads the outcomes
once per tick in ``advance_move_back``: the mover places a replica here through the placement
engine (the decision limited to this node), waits until it is ready, and only then evicts the
copy elsewhere through the Eviction API.

So a workload never has fewer ready replicas than before: nothing is dropped. A workload that no
longer fits the node (the new config offers no slot for its share, or others took the room), or
is not home when ``ROLLOUT_STEP_TIMEOUT_S`` runs out, stays where it is (the mover rolled the
move back: its replica here released, the copy kept), and the node's reason and an audit event
say why. Moving back never fails the node - its config is proven - it ends ``succeeded``.

Progress kept in ``RolloutNode.progress``: ``homes`` (copy -> its move back here), ``back``
(copies moved), ``stays`` (copy -> why it stays), ``move_back_started_at``.
"""
from __future__ import annotations

from datetime import datetime

from django.conf import settings

from lifecycle.audit import record
from lifecycle.errors import Conflict
from rollouts.choices import NodeState
from rollouts.models import NODE_STATES, RolloutNode
from rollouts.restoring import requester_of
from rollouts.steps import ACTIVE_PLACEMENTS, ACTOR, note_waiting, save_progress
from scheduler.choices import MOVE_FINAL, MoveRequester, MoveStatus
from scheduler.models import Move, Placement
from scheduler.services.moving import request_move

REPLICA_PLACED_BACK = "rolloutnode.replica_placed_back"
REPLICA_MOVED_BACK = "rolloutnode.replica_moved_back"
REPLICA_STAYS = "rolloutnode.replica_stays_elsewhere"


def advance_move_back(step: RolloutNode, now: datetime) -> None:
    """Ask for the moves back and read their outcomes (see the module docstring)."""
    started = step.progress.get("move_back_started_at")
    if started is None:
        started = now.isoformat()
        save_progress(step, move_back_started_at=started)
    left_s = settings.ROLLOUT_STEP_TIMEOUT_S - (now - datetime.fromisoformat(started)).total_seconds()
    _ask_for_moves_home(step, max(10, int(left_s)))
    waiting = _read_moves_home(step)
    if waiting:
        note_waiting(step, f"moving back: waiting for {waiting} replica(s) to become ready here")
        return
    back, stays = step.progress.get("back", []), step.progress.get("stays", {})
    reason = f"{len(back)} workload replica(s) moved back"
    if stays:
        reason += f"; {len(stays)} stayed elsewhere: {'; '.join(sorted(stays.values()))}"
    NODE_STATES.move(step, NodeState.SUCCEEDED, actor=ACTOR, reason=reason)


def _ask_for_moves_home(step: RolloutNode, timeout_s: int) -> None:
    """A move back here for each copy still running and not yet handled."""
    homes: dict[str, int] = dict(step.progress.get("homes", {}))
    stays: dict[str, str] = dict(step.progress.get("stays", {}))
    copies = (Placement.objects.filter(pk__in=list(step.progress.get("prewarmed", {}).values()),
                                       status__in=ACTIVE_PLACEMENTS)
              .select_related("deployment", "node").order_by("pk"))
    for copy in copies:
        key = str(copy.pk)
        if key in homes or key in stays:
            continue
        try:
            move = request_move(copy, why=f"moving back onto {step.node_name} after rollout {step.rollout_id}",
                                requested_by=MoveRequester.ROLLOUT, requester=requester_of(step),
                                to_node=step.node_name, timeout_s=timeout_s)
        except Conflict as refused:
            _stay(step, stays, copy.pk, f"{copy.deployment}: {refused.detail}")
            continue
        homes[key] = move.pk
        save_progress(step, homes=homes)


def _read_moves_home(step: RolloutNode) -> int:
    """Each move back's news (audited on the node); how many are still under way."""
    homes: dict[str, int] = step.progress.get("homes", {})
    back: list[str] = list(step.progress.get("back", []))
    stays: dict[str, str] = dict(step.progress.get("stays", {}))
    placed: list[str] = list(step.progress.get("placed_back", []))
    moves = Move.objects.select_related("deployment").in_bulk(list(homes.values()))
    waiting = 0
    for key, move_pk in sorted(homes.items()):
        move = moves.get(move_pk)
        if key in back or key in stays or move is None:
            continue
        if move.replacement_id is not None and key not in placed:
            placed.append(key)
            save_progress(step, placed_back=placed)
            record(REPLICA_PLACED_BACK, step, actor=ACTOR,
                   reason=f"{move.deployment} replica placed back on {step.node_name} (move {move.pk})",
                   after={"copy_placement": int(key), "new_placement": move.replacement_id})
        if move.status not in MOVE_FINAL:
            waiting += 1
            continue
        if move.status == MoveStatus.DONE:
            back.append(key)
            save_progress(step, back=back)
            record(REPLICA_MOVED_BACK, step, actor=ACTOR,
                   reason=f"{move.deployment} ready on {step.node_name}; its copy elsewhere evicted (move {move.pk})",
                   after={"copy_placement": int(key), "new_placement": move.replacement_id})
            continue
        _stay(step, stays, int(key), f"{move.deployment}: {move.reason}")
    return waiting


def _stay(step: RolloutNode, stays: dict[str, str], copy_pk: int, reason: str) -> None:
    stays[str(copy_pk)] = reason
    save_progress(step, stays=stays)
    record(REPLICA_STAYS, step, actor=ACTOR, reason=reason, after={"copy_placement": copy_pk})
