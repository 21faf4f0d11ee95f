"""Placing and releasing replicas: the one way a replica gets capacity, and the one way it gives it back.

``place_replicas(deployment, replica_indexes)`` decides the replicas on an up-to-date snapshot,
reserves them in one transaction (all or nothing, with bounded retries: see ``capacity``), then
creates their workloads on the cluster; a failure after the reservation releases exactly what
was reserved. The deploy pipeline calls it for every replica of a new (still unsaved)
deployment, which is stored in the same transaction as its reservations, so a request that does
not fit stores nothing; rolling updates, consolidation and autoscaling call it for replicas of an
existing deployment, under new replica indexes (a released placement keeps its row and index, so
history stays readable). ``release_replica`` (from ``releasing``) removes one replica.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from gpuplane.observability import PLACEMENT_DECISION_SECONDS
from lifecycle.audit import AuditEntry, record_many
from lifecycle.transitions import transition
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError
from scheduler.adapters import InventorySnapshot, build_snapshot, namespace_quota
from scheduler.choices import DecisionOutcome, DeploymentStatus, PlacementStatus
from scheduler.core import Scheduler
from scheduler.core.wording import counted
from scheduler.models import Decision, Deployment, Placement
from scheduler.services import snapshots
from scheduler.services.capacity import (
    charge_gpus,
    check_quota,
    claim,
    is_retryable,
    lock_gpus,
    placement_lock,
    release_placements,
)
from scheduler.services.deciding import ReplicaPlan, decide, placement_scheduler
from scheduler.services.errors import CapacityConflict, DeployFailed, NoCapacity
from scheduler.services.execution import create_workloads, delete_workloads, specs_for
from scheduler.services.releasing import ACTIVE_PLACEMENT, release_replica
from scheduler.services.spec import DeploySpec, spec_of
from scheduler.services.watching import ACTIVE, enqueue_watch, fail_deployment, watch_runs_inline
from scheduler.workloads import group_placements

logger = logging.getLogger(__name__)

# release_replica lives in ``releasing`` (``watching`` needs it too); callers may keep importing it here.
__all__ = ["ACTIVE_PLACEMENT", "next_replica_index", "place_replicas", "release_all", "release_replica"]

MAX_ATTEMPTS = 5

# What a committed reservation hands on: its placements, the plans behind them, node ids by name.
Reservation = tuple[list[Placement], list[ReplicaPlan], Mapping[str, int]]


def place_replicas(deployment: Deployment, replica_indexes: Iterable[int], *, spec: DeploySpec | None = None,
                   user: Any = None, cluster: ClusterBackend | None = None, timed: bool = True,
                   nodes: Iterable[str] | None = None) -> list[Placement]:
    """Decide, reserve and start ``replica_indexes`` of ``deployment``; return their placements.

    The whole call (snapshot, decisions, reservation, cluster calls) is observed into
    ``PLACEMENT_DECISION_SECONDS`` unless ``timed`` is False (``deploy`` times its own, wider call).
    ``nodes`` limits the decision to those node names (a rollout moving replicas back onto the
    node they left); None: every node.

    ``deployment`` is either unsaved (a new deploy: it is saved with its reservations, in one
    transaction) or an active stored one whose replica indexes are unused. ``spec`` is the
    request (default: the one the deployment was made from). Raises ``NoCapacity`` (nothing
    stored, nothing held), ``DeployFailed`` (the cluster refused a workload: what these replicas
    reserved is released; a new deployment is stored FAILED) or ``ValueError`` (bad indexes, or
    a deployment that is not active).
    """
    if timed:
        with PLACEMENT_DECISION_SECONDS.time():
            return place_replicas(deployment, replica_indexes, spec=spec, user=user, cluster=cluster, timed=False,
                                  nodes=nodes)
    indexes = sorted(set(replica_indexes))
    if not indexes or indexes[0] < 0:
        raise ValueError(f"replica indexes must be a non-empty set of whole numbers >= 0, not {indexes}")
    new = deployment.pk is None
    if not new:
        if deployment.status not in ACTIVE:
            raise ValueError(f"{deployment} is {deployment.status}: only an active deployment gets replicas")
        used = set(deployment.placements.filter(replica_index__in=indexes).values_list("replica_index", flat=True))
        if used:
            raise ValueError(f"{deployment} already has replicas {sorted(used)}")
    request = spec if spec is not None else spec_of(deployment)
    backend = cluster if cluster is not None else get_cluster()
    placements, plans, node_pks = _decide_and_reserve(deployment, request, indexes, user,
                                                      None if nodes is None else list(nodes))
    try:
        decision_ids = _record_decisions(deployment, plans, node_pks)
    except BaseException:
        _undo(deployment, placements, "placement aborted by an internal error; everything reserved was released",
              new=new)
        raise
    return _start(deployment, placements, decision_ids, backend, new=new)


def release_all(deployment: Deployment, *, user: Any = None, reason: str = "") -> int:
    """Release every placement of a deployment in the current transaction (no cluster call)."""
    placements = Placement.objects.filter(deployment_id=deployment.pk)
    holding = list(placements.filter(holds__isnull=False).distinct())
    released = release_placements(placements.values_list("pk", flat=True))
    placements.update(status=PlacementStatus.RELEASED)
    record_many(AuditEntry("placement.released", p, actor=user, reason=reason, before={"status": p.status},
                           after={"status": PlacementStatus.RELEASED.value}) for p in holding)
    return released


def next_replica_index(deployment: Deployment) -> int:
    """The lowest replica index no placement of the deployment ever used."""
    indexes = deployment.placements.values_list("replica_index", flat=True)
    return max(indexes, default=-1) + 1


# ---- reserving ---------------------------------------------------------------------------------


def _decide_and_reserve(deployment: Deployment, spec: DeploySpec, indexes: Sequence[int], user: Any,
                        nodes: list[str] | None = None) -> Reservation:
    """Decide and reserve with bounded retries (see ``capacity``, "Reservation and concurrency");
    return the placements, the plans they were reserved by and the node ids of the snapshot.

    Each attempt decides and reserves in one transaction under the exclusive placement lock, on
    this process's snapshot brought up to date after the lock (``snapshots``): deploys of one
    cluster are serialised, so they do not race each other into retries (the threads of one
    process queue for the snapshot first, so that the lock's holder never waits for a sibling). Outside writers
    (inventory sync, releases) can still take what was chosen; the conditional claims refuse
    it and the next attempt decides on a refreshed snapshot (the third one rebuilt whole).
    Inside an outer transaction the cache is bypassed (see ``snapshots``), and so it is for a
    decision limited to ``nodes`` (a snapshot of those nodes alone).
    """
    scheduler = placement_scheduler()
    cached = nodes is None and snapshots.usable()
    with snapshots.SNAPSHOTS.turn() if cached else nullcontext():
        if cached:
            snapshots.SNAPSHOTS.prepare()
        return _attempts(deployment, spec, indexes, user, nodes, scheduler, cached=cached)


def _attempts(deployment: Deployment, spec: DeploySpec, indexes: Sequence[int], user: Any,
              nodes: list[str] | None, scheduler: Scheduler, *, cached: bool) -> Reservation:
    new = deployment.pk is None
    last_conflict = ""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        reserved = False
        try:
            with transaction.atomic():
                placement_lock(exclusive=True)
                with _inventory(cached, full=attempt >= 3, nodes=nodes) as inventory:
                    quota = namespace_quota(spec.namespace)
                    plans = decide(spec, inventory, scheduler, quota=quota, replica_indexes=indexes)
                    node_pks = inventory.index.node_pk
                    placements = _reserve(deployment, plans, node_pks, user)
                    if quota is not None:
                        check_quota(spec.namespace)
            reserved = True  # committed
            return placements, plans, node_pks
        except (CapacityConflict, IntegrityError) as error:
            last_conflict = str(error)
        except OperationalError as error:
            if not is_retryable(error):
                raise
            last_conflict = str(error)
        finally:
            # Reserved and committed: the row exists, no need to ask.
            if new and not reserved and (
                deployment.pk is None or not Deployment.objects.filter(pk=deployment.pk).exists()
            ):
                _forget(deployment)  # rolled back: the instance must not keep the id it never got
        logger.info("placement of %s/%s conflicted (attempt %d): %s", spec.namespace, spec.name, attempt,
                    last_conflict)
    inventory = build_snapshot(nodes)
    # Raises NoCapacity when the capacity (or the namespace's quota) is simply gone.
    plans = decide(spec, inventory, scheduler, quota=namespace_quota(spec.namespace), replica_indexes=indexes)
    message = (f"capacity kept changing while placing {spec.namespace}/{spec.name}: {MAX_ATTEMPTS} attempts "
               f"conflicted with other writers (last: {last_conflict}); try again")
    raise NoCapacity(message, plans[0].matrix if plans else {}, indexes[0])


@contextmanager
def _inventory(cached: bool, *, full: bool, nodes: list[str] | None = None) -> Iterator[InventorySnapshot]:
    """The process's snapshot (``snapshots``), or one built for this decision alone (of ``nodes``)."""
    if cached:
        with snapshots.SNAPSHOTS.lease(full=full) as inventory:
            yield inventory
    else:
        yield build_snapshot(nodes)


def _forget(deployment: Deployment) -> None:
    deployment.pk = None
    deployment._state.adding = True


def _reserve(deployment: Deployment, plans: list[ReplicaPlan], node_pks: Mapping[str, int],
             user: Any) -> list[Placement]:
    """Store the placements of ``plans``, claim their partitions and audit it; return the placements.

    Saves ``deployment`` first when it is new. Must run inside a transaction; raises
    ``CapacityConflict`` or ``IntegrityError`` when capacity was taken meanwhile (the caller rolls
    back and retries).
    """
    added = deployment.pk is not None
    audit: list[AuditEntry] = []  # written in one INSERT with the reservations' rows below
    if not added:
        deployment.save()
        audit.append(AuditEntry("deployment.created", deployment, actor=user, reason="deploy request",
                                after={"replicas": deployment.replicas, "memory_mib": deployment.memory_mib,
                                       "gpu_count": deployment.gpu_count, "sharing": deployment.sharing}))
    placements = [_placement(deployment, plan, node_pks) for plan in plans]
    for group in group_placements(deployment, placements, added=added):
        for placement in group.placements:
            placement.workload_name = group.name
    Placement.objects.bulk_create(placements)
    if any(p.pk is None for p in placements):  # pragma: no cover - both supported databases return ids
        by_index = dict(deployment.placements.values_list("replica_index", "pk"))
        for placement in placements:
            placement.pk = by_index[placement.replica_index]

    claims = [(c, placement) for plan, placement in zip(plans, placements, strict=True) for c in plan.claims]
    lock_gpus(c.gpu_pk for c, _ in claims)
    charges: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for partition_claim, placement in sorted(claims, key=lambda item: (item[0].gpu_pk, item[0].slot)):
        milli, memory = claim(partition_claim, placement.pk)
        charges[partition_claim.gpu_pk][0] += milli
        charges[partition_claim.gpu_pk][1] += memory
    charge_gpus(charges)

    # object_repr as str(placement) gives it, without loading each placement's node under the lock.
    audit.extend(AuditEntry("placement.reserved", placement, actor=user, reason=plan.message,
                            after=_placement_facts(placement, plan),
                            object_repr=f"{deployment} #{placement.replica_index} on {plan.decision.node or None}")
                 for plan, placement in zip(plans, placements, strict=True))
    record_many(audit)
    # No watch is enqueued here: an eager one would run before the workloads exist. A deployment
    # left PENDING by a crash before ``_start`` is found by the sweeper and failed on timeout.
    return placements


def _record_decisions(deployment: Deployment, plans: list[ReplicaPlan], node_pks: Mapping[str, int]) -> dict[int, int]:
    """Store the decision matrices of ``plans``; return their ids by replica index (the workloads
    are labelled with them).

    After the reservation's commit, not under the placement lock: a matrix is tens of KB of JSON
    to build, encode and store (a sixth of the lock's hold at 5,000 nodes), and it explains the
    reservation without being part of it (the ``placement.reserved`` audit rows are).
    """
    decisions = [
        Decision(
            deployment=deployment, replica_index=plan.replica_index, outcome=plan.outcome,
            node_id=node_pks.get(plan.decision.node) if plan.decision.node else None,
            profile=plan.decision.profile_name, weights=dict(plan.decision.weights), matrix=plan.matrix,
            message=plan.message, duration_ms=plan.duration_ms,
        )
        for plan in plans
    ]
    if len(decisions) == 1:
        decisions[0].save(force_insert=True)  # one INSERT; bulk_create would wrap it in BEGIN/COMMIT
    else:
        Decision.objects.bulk_create(decisions)
    if any(d.pk is None for d in decisions):  # pragma: no cover - both supported databases return ids
        return dict(deployment.decisions.values_list("replica_index", "pk"))
    return {d.replica_index: d.pk for d in decisions}


def _placement(deployment: Deployment, plan: ReplicaPlan, node_pks: Mapping[str, int]) -> Placement:
    assignment = plan.decision.assignment
    if plan.outcome == DecisionOutcome.PLACED and assignment is not None:
        first = assignment.partitions[0]
        return Placement(
            deployment=deployment, node_id=node_pks[assignment.node], replica_index=plan.replica_index,
            sharing=str(assignment.kind), gpu_indexes=list(assignment.gpu_indexes),
            share_milli=first.share_milli, memory_mib=first.memory_mib, mig_profile=first.mig_profile,
            resources=dict(assignment.resources), env=dict(assignment.env),
            cpu_milli=assignment.cpu_milli, host_memory_mib=assignment.host_memory_mib,
        )
    return Placement(deployment=deployment, node=None, replica_index=plan.replica_index)


def _placement_facts(placement: Placement, plan: ReplicaPlan) -> dict[str, Any]:
    return {"replica": placement.replica_index, "node": plan.decision.node or None, "outcome": str(plan.outcome),
            "gpus": list(placement.gpu_indexes), "sharing": placement.sharing,
            "share_milli": placement.share_milli, "mig_profile": placement.mig_profile}


# ---- starting ----------------------------------------------------------------------------------


def _start(deployment: Deployment, placements: list[Placement], decision_ids: Mapping[int, int],
           cluster: ClusterBackend, *, new: bool) -> list[Placement]:
    """Create the workloads of ``placements``; on failure undo them and release (``DeployFailed``).
    Return the placements as stored, with their nodes, in replica order.

    A new deployment moves PENDING -> PLACED. One that gained replicas moves back to PLACED until
    the watch sees every workload ready, unless all its desired replicas run already: then it
    stays RUNNING (it never stopped serving) and only the new replicas wait for the watch. Either
    way the watch is enqueued after commit.
    """
    for placement in placements:
        placement.deployment = deployment
    loaded = list(Placement.objects.filter(pk__in=[p.pk for p in placements]).select_related("node")
                  .order_by("replica_index"))
    specs = specs_for(deployment, loaded, decision_ids)
    try:
        create_workloads(cluster, specs)
    except ClusterError as error:
        leftovers = getattr(error, "leftovers", [])
        message = (f"the cluster refused workload {getattr(error, 'workload', '')}: {error}; everything reserved "
                   "was released")
        if leftovers:
            message += f" (could not remove {', '.join(leftovers)}; inventory sync will account for their pods)"
        _undo(deployment, loaded, message, new=new)
        raise DeployFailed(message, deployment) from error
    except BaseException:
        _undo(deployment, loaded, "placement aborted by an internal error; everything reserved was released",
              new=new)
        raise

    from_statuses = [DeploymentStatus.PENDING] if new else [DeploymentStatus.PLACED, DeploymentStatus.RUNNING]
    message = _placed_message(loaded)
    with transaction.atomic():
        if not new and _serving(deployment):
            # Every desired replica is ready: the deployment keeps serving, so it stays RUNNING while
            # the extra replica (a copy) starts; the watch marks that replica running once ready.
            placed = True
        else:
            # With the deployment instance, PENDING -> PLACED is one conditional UPDATE (no locking read).
            placed = transition(Deployment, deployment.pk, from_statuses, DeploymentStatus.PLACED,
                                actor="system:scheduler", reason=message,
                                values={"placed_at": timezone.now(), "message": message}, instance=deployment)
        if placed:
            Placement.objects.filter(pk__in=[p.pk for p in loaded], status=PlacementStatus.RESERVED).update(
                status=PlacementStatus.BINDING)
    if not placed:
        # Deleted (or failed by the watch) while we were creating workloads: undo ours too.
        delete_workloads(cluster, deployment.namespace, [spec.name for spec in specs])
        deployment.refresh_from_db()
        raise DeployFailed(f"{deployment} was {deployment.status} while its workloads were being created",
                           deployment)
    # Only now, with the workloads created and PLACED committed: an eager watch (tests, dev)
    # runs right here and must find them. Robust: a broken callback never fails the deploy.
    deployment_id = deployment.pk
    transaction.on_commit(lambda: enqueue_watch(deployment_id), robust=True)
    if not new or watch_runs_inline():
        # A new deployment's instance holds what it was saved with plus what the transition wrote
        # (no re-read); an existing one may have changed meanwhile, and an eager watch (tests, dev)
        # may have moved either on already.
        deployment.refresh_from_db()
    for placement in loaded:
        if placement.status == PlacementStatus.RESERVED:
            placement.status = PlacementStatus.BINDING  # as the UPDATE above wrote it: no re-read
    return loaded


def _serving(deployment: Deployment) -> bool:
    """True when the stored deployment is RUNNING with at least its desired replicas running (locked
    against a concurrent status change until the caller's transaction ends)."""
    row = Deployment.objects.select_for_update().filter(pk=deployment.pk, status=DeploymentStatus.RUNNING).first()
    return row is not None and row.placements.filter(status=PlacementStatus.RUNNING).count() >= row.replicas


def _undo(deployment: Deployment, placements: list[Placement], message: str, *, new: bool) -> None:
    """Release what ``placements`` reserved: the whole deployment FAILED when new, else these replicas."""
    if new:
        fail_deployment(deployment, message)
        return
    with transaction.atomic():
        release_placements([p.pk for p in placements])
        Placement.objects.filter(pk__in=[p.pk for p in placements]).update(status=PlacementStatus.FAILED)
        record_many(AuditEntry("placement.failed", p, reason=message) for p in placements)


def _placed_message(placements: list[Placement]) -> str:
    nodes = sorted({p.node.name for p in placements if p.node_id is not None})
    handed = sum(1 for p in placements if p.node_id is None)
    parts = []
    if nodes:
        parts.append(f"placed on {', '.join(nodes)}")
    if handed:
        parts.append(f"{counted(handed, 'replica')} handed to the default Kubernetes scheduler")
    return "; ".join(parts) + "; waiting for the workloads to be ready"
