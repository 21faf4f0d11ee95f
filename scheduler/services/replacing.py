"""Replacement first: moving a replica without ever having fewer ready ones than before.

A move places a replacement, waits until its workload is ready, and only then releases the
original. Pre-warming and moving back (``rollouts``) and consolidation all move replicas this
way; each keeps its own bookkeeping (the rollout step's progress, the plan's entries), its audit
events and its reasons, and calls these steps:

- ``index_spent``: whether a replica index was used by an attempt that is over (the index is then
  taken for good: a fresh one is chosen);
- ``give_back_half_placed``: release a replica a run that died left reserved without a workload;
- ``replacement_index``: the index a replacement is placed under: the one chosen before, unless
  it is spent, else a fresh one;
- ``place_replacement``: the replica at a chosen index, adopted when a run that died placed it
  already, else placed now (optionally on one node only);
- ``is_ready``: whether the cluster reports a replica's workload ready;
- ``finish_replacement``: once the replacement is ready, release the original; a replacement that
  did not start, or is not ready in time, is given up (released) and the original stays.

The caller chooses and persists the replica index before placing, so a run that dies between
placing and noting the replacement adopts it instead of placing a second one.
"""
from __future__ import annotations

from dataclasses import replace
from enum import Enum
from typing import Any

from nodes.cluster.base import ClusterBackend
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, Placement
from scheduler.services.placing import next_replica_index, place_replicas
from scheduler.services.releasing import ACTIVE_PLACEMENT, release_replica
from scheduler.services.spec import spec_of


class Finish(Enum):
    """Where ``finish_replacement`` left a move."""

    WAITING = "waiting"  # the replacement is not ready yet: ask again next tick
    NOT_STARTED = "not started"  # the replacement failed or was released: the original stays
    NOT_READY_IN_TIME = "not ready in time"  # the replacement was released: the original stays
    DONE = "done"  # the replacement is ready and the original released


def index_spent(deployment: Deployment, index: int) -> bool:
    """True when replica ``index`` of ``deployment`` belongs to an attempt that is over (failed or
    released): a replica index is never reused, so the next attempt needs a fresh one."""
    return deployment.placements.filter(replica_index=index).exclude(status__in=ACTIVE_PLACEMENT).exists()


def replacement_index(deployment: Deployment, chosen: int | None) -> int:
    """The replica index a replacement of ``deployment`` is placed under: ``chosen`` (persisted by
    an earlier run) while its attempt may still be adopted, else a fresh one (None: none chosen
    yet; spent: that attempt is over). The caller persists a changed index before placing."""
    if chosen is None or index_spent(deployment, chosen):
        return next_replica_index(deployment)
    return chosen


def give_back_half_placed(deployment: Deployment, index: int, *, cluster: ClusterBackend, user: Any,
                          reason: str) -> bool:
    """Release replica ``index`` if a run that died left it reserved: placing moves a replica on
    from RESERVED once its workload exists, and ticks never overlap, so a reserved one seen here
    has no workload, or one never confirmed (adopting it would wait for a pod that never comes).
    True when it was released (its index is then spent)."""
    if not deployment.placements.filter(replica_index=index, status=PlacementStatus.RESERVED).exists():
        return False
    return release_replica(deployment, index, user=user, cluster=cluster, reason=reason)


def place_replacement(deployment: Deployment, index: int, *, cluster: ClusterBackend, user: Any,
                      node: str | None = None) -> Placement:
    """The active replica ``index`` of ``deployment``: the one a run that died placed (adopted), else
    one placed now through the placement services. With ``node``, only that node is considered and
    the replica is never handed to the default scheduler (the point is that very node).

    Raises what ``place_replicas`` raises (``NoCapacity``, ``DeployFailed``, ``ValueError``); each
    caller decides whether that means waiting or giving the move up."""
    placed = deployment.placements.filter(replica_index=index, status__in=ACTIVE_PLACEMENT).first()
    if placed is not None:
        return placed
    if node is None:
        return place_replicas(deployment, [index], user=user, cluster=cluster)[0]
    spec = replace(spec_of(deployment), allow_default_scheduler=False)
    return place_replicas(deployment, [index], spec=spec, user=user, cluster=cluster, nodes=[node])[0]


def is_ready(placement: Placement, cluster: ClusterBackend) -> bool:
    """True when the cluster reports ``placement``'s workload ready (False before it has one)."""
    return bool(placement.workload_name
                and cluster.workload_ready(placement.deployment.namespace, placement.workload_name))


def finish_replacement(original: Placement, replacement: Placement, *, cluster: ClusterBackend, user: Any,
                       timed_out: bool, moved_reason: str, not_ready_reason: str) -> Finish:
    """Release ``original`` once ``replacement`` is ready (``moved_reason`` on its release). A
    replacement that is not ready when ``timed_out`` is released (``not_ready_reason``) and the
    original keeps serving. An original no longer active is left alone (nothing to release)."""
    if replacement.status not in ACTIVE_PLACEMENT:
        return Finish.NOT_STARTED
    if not is_ready(replacement, cluster):
        if not timed_out:
            return Finish.WAITING
        release_replica(replacement.deployment, replacement.replica_index, user=user, cluster=cluster,
                        reason=not_ready_reason)
        return Finish.NOT_READY_IN_TIME
    if original.status in ACTIVE_PLACEMENT:
        release_replica(original.deployment, original.replica_index, user=user, cluster=cluster,
                        reason=moved_reason)
    return Finish.DONE
