"""Moving workloads back onto a node once it is proven (``RollingUpdate.move_back``).

With ``move_back``, a node proven at its new config and uncordoned goes from ``verifying`` to
``moving-back`` (not ``succeeded``) when workloads left it: ``progress["prewarmed"]`` maps each
replica that was on it to its copy elsewhere. For each copy still running, the reconciler calls
``advance_move_back`` once per tick, which

1. places a new replica of the copy's deployment on this node, through the placement services
   with the decision limited to this node (the replica index chosen and persisted first, as the
   pre-warm step does, so a crashed tick adopts what it placed instead of placing another, and
   gives back what it only reserved: that index is spent, and a fresh one is placed);
2. waits until that replica is ready;
3. only then releases the copy elsewhere.

So a workload never has fewer ready replicas than before: nothing is dropped. A workload that no
longer fits the node (the new config offers no slot for its share, or others took the room) stays
where it is, and the node's reason and an audit event say why; so do those not home when
``ROLLOUT_STEP_TIMEOUT_S`` runs out (a replica placed here but not ready is released, the copy
kept). Moving back never fails the node - its config is proven - it ends ``succeeded``.

Progress kept in ``RolloutNode.progress``: ``homes`` (copy -> its replica back here),
``back`` (copies released), ``stays`` (copy -> why it stays), ``move_back_started_at``.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from lifecycle.audit import record
from nodes.cluster.base import ClusterBackend, ClusterError
from rollouts.choices import NodeState
from rollouts.models import NODE_STATES, RolloutNode
from rollouts.steps import ACTIVE_PLACEMENTS, ACTOR, note_waiting, replica_index_for, save_progress
from scheduler.models import Placement
from scheduler.services.errors import DeployFailed, NoCapacity
from scheduler.services.replacing import Finish, finish_replacement, give_back_half_placed, place_replacement

REPLICA_PLACED_BACK = "rolloutnode.replica_placed_back"
REPLICA_MOVED_BACK = "rolloutnode.replica_moved_back"
REPLICA_STAYS = "rolloutnode.replica_stays_elsewhere"


def advance_move_back(step: RolloutNode, cluster: ClusterBackend, now: datetime) -> None:
    """Do the next piece of moving ``step``'s workloads back (see the module docstring)."""
    started = step.progress.get("move_back_started_at")
    if started is None:
        started = now.isoformat()
        save_progress(step, move_back_started_at=started)
    timed_out = now - datetime.fromisoformat(started) > timedelta(seconds=settings.ROLLOUT_STEP_TIMEOUT_S)
    try:
        waiting = _place_homes(step, cluster, timed_out) + _release_copies(step, cluster, timed_out)
    except ClusterError as error:  # the next tick retries: every call here is safe to repeat
        note_waiting(step, f"moving back: {error}")
        return
    if waiting:
        note_waiting(step, f"moving back: waiting for {waiting} replica(s) to become ready here")
        return
    back, stays = step.progress.get("back", []), step.progress.get("stays", {})
    reason = f"{len(back)} workload replica(s) moved back"
    if stays:
        reason += f"; {len(stays)} stayed elsewhere: {'; '.join(sorted(stays.values()))}"
    NODE_STATES.move(step, NodeState.SUCCEEDED, actor=ACTOR, reason=reason)


def _place_homes(step: RolloutNode, cluster: ClusterBackend, timed_out: bool) -> int:
    """Place a replica here for each copy not yet handled; 0 (placing does not wait)."""
    homes: dict[str, int] = dict(step.progress.get("homes", {}))
    stays: dict[str, str] = dict(step.progress.get("stays", {}))
    copies = (Placement.objects.filter(pk__in=list(step.progress.get("prewarmed", {}).values()),
                                       status__in=ACTIVE_PLACEMENTS)
              .select_related("deployment").order_by("pk"))
    for copy in copies:
        key = str(copy.pk)
        if key in homes or key in stays:
            continue
        deployment = copy.deployment
        if timed_out:
            _stay(step, stays, copy, f"{deployment} not moved back within {settings.ROLLOUT_STEP_TIMEOUT_S} s")
            continue
        index = replica_index_for(step, copy)
        if give_back_half_placed(deployment, index, cluster=cluster, user=ACTOR,
                                 reason="reserved by a rollout step that died before its workload was created"):
            index = replica_index_for(step, copy)  # that index is spent now: a fresh one
        try:  # adopts the replica a tick that died placed before noting it
            home = place_replacement(deployment, index, cluster=cluster, user=ACTOR, node=step.node_name)
        except (NoCapacity, DeployFailed, ValueError) as error:
            _stay(step, stays, copy, f"{deployment} does not fit {step.node_name} now: {error}")
            continue
        homes[key] = home.pk
        save_progress(step, homes=homes)
        record(REPLICA_PLACED_BACK, step, actor=ACTOR,
               reason=f"{deployment} replica {home.replica_index} placed back on {step.node_name}",
               after={"copy_placement": copy.pk, "new_placement": home.pk})
    return 0


def _release_copies(step: RolloutNode, cluster: ClusterBackend, timed_out: bool) -> int:
    """Release each copy whose replica here is ready; how many replicas here are not ready yet."""
    homes: dict[str, int] = step.progress.get("homes", {})
    back: list[str] = list(step.progress.get("back", []))
    stays: dict[str, str] = dict(step.progress.get("stays", {}))
    waiting = 0
    for key, home_pk in sorted(homes.items()):
        if key in back or key in stays:
            continue
        home = Placement.objects.select_related("deployment").get(pk=home_pk)
        copy = Placement.objects.select_related("deployment").get(pk=int(key))
        deployment = home.deployment
        # The copy keeps serving until its replica here is ready; one never ready here goes.
        finish = finish_replacement(copy, home, cluster=cluster, user=ACTOR, timed_out=timed_out,
                                    moved_reason=f"moved back onto {step.node_name} for rollout {step.rollout_id}",
                                    not_ready_reason=f"not ready on {step.node_name} in time; "
                                                     "the copy elsewhere stays")
        if finish == Finish.NOT_STARTED:
            _stay(step, stays, copy, f"{deployment}: its replica placed back here did not start ({home.status})")
            continue
        if finish == Finish.NOT_READY_IN_TIME:
            _stay(step, stays, copy, f"{deployment}: its replica here was not ready in time")
            continue
        if finish == Finish.WAITING:
            waiting += 1
            continue
        back.append(key)
        save_progress(step, back=back)
        record(REPLICA_MOVED_BACK, step, actor=ACTOR,
               reason=f"{deployment} replica {home.replica_index} ready on {step.node_name}; "
                      f"its copy (replica {copy.replica_index}) released",
               after={"copy_placement": copy.pk, "new_placement": home.pk})
    return waiting


def _stay(step: RolloutNode, stays: dict[str, str], copy: Placement, reason: str) -> None:
    stays[str(copy.pk)] = reason
    save_progress(step, stays=stays)
    record(REPLICA_STAYS, step, actor=ACTOR, reason=reason, after={"copy_placement": copy.pk})

