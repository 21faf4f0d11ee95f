"""Capacity: the placement lock, claiming partitions for a placement, releasing them, quotas.

Reservation and concurrency
---------------------------
A partition is held by a placement when a ``PartitionHold`` row names it; the partition is that
row's primary key, so the database itself refuses a second holder. A partition is claimed only
if it is still free (no hold, no pod found on it by inventory sync), GPU counters move with
``F()`` expressions, and the database's check constraints (``allocated_milli <= 1000``,
``allocated_memory_mib <= memory_mib``, unique slot per GPU) refuse anything that would
over-allocate; an IntegrityError is a conflict, never a 500. Row locks are taken GPUs first in
primary-key order, then partitions, like inventory sync, so the two cannot deadlock, and a
partition's ``pod`` cannot change under a claim (sync writes it only with its GPU locked).

Decisions are serialised per cluster: each attempt decides and reserves in one transaction
under an exclusive placement lock (a PostgreSQL advisory lock; on SQLite every write transaction
already holds the database's write lock, settings ``transaction_mode IMMEDIATE``), on a snapshot
brought up to date after the lock (``snapshots``), so concurrent deploys never take the same
capacity and retry: they queue for a few milliseconds instead. Writers that do not take the lock
(inventory sync, releases) may still take what a decision chose; the claims then fail, which is
a conflict, and the next attempt decides on a refreshed snapshot. ``placement_lock`` keeps a
shared mode for readers that must not overlap a reservation.

Namespace quotas
----------------
A ``NamespaceQuota`` row caps the compute share (milli-GPU) and the memory need that a
namespace's active deployments hold (``adapters.namespace_quota`` sums them); the core's
NamespaceQuota filter turns a request away where it would exceed either. The decision may have
read a use that is stale by the time it reserves, so a reservation in a namespace with a quota
takes the placement lock exclusively and re-checks the use, its own claims included, before it
commits (``check_quota``); over the limit it is a conflict, and the serialised retry decides
again on the real use. Replicas handed to the default scheduler hold nothing gpuplane can
charge, so a namespace with a quota is never handed over.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db import OperationalError, connection
from django.db.models import Exists, F, IntegerField, OuterRef, QuerySet, Value
from django.db.models.functions import Greatest

from nodes.models import GPU, Partition
from nodes.vocabulary import PartitionKind
from scheduler.adapters import PartitionClaim, namespace_quota
from scheduler.core.wording import gb, gpus
from scheduler.models import PartitionHold
from scheduler.services.errors import CapacityConflict

# Arbitrary but fixed: the key of the PostgreSQL advisory lock that serialises placement retries.
PLACEMENT_LOCK_KEY = 7_245_002_194_617_303_041
# PostgreSQL: deadlock detected, serialization failure. SQLite: the write lock timed out.
_RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})


def placement_lock(*, exclusive: bool) -> None:
    """Take the placement lock for the current transaction (see "Reservation and concurrency")."""
    if connection.vendor == "postgresql":
        function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {function}(%s)", [PLACEMENT_LOCK_KEY])
    # SQLite (transaction_mode IMMEDIATE): the transaction already holds the write lock.


def is_retryable(error: OperationalError) -> bool:
    """A deadlock, a serialization failure or SQLite's busy lock: worth another attempt."""
    cause = error.__cause__
    if getattr(cause, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    return connection.vendor == "sqlite" and "locked" in str(error)


def lock_gpus(gpu_pks: Iterable[int]) -> None:
    """Row-lock GPUs in primary-key order (inventory sync's order: no deadlock between us)."""
    pks = sorted(set(gpu_pks))
    if pks:
        list(GPU.objects.select_for_update().filter(pk__in=pks).order_by("pk").values_list("pk", flat=True))


def _free(partition_pk: int, kind: str) -> QuerySet[Partition]:
    """The partition row, if it is still of ``kind`` and free: no pod on it and no holder."""
    held = PartitionHold.objects.filter(partition_id=OuterRef("pk"))
    return Partition.objects.filter(pk=partition_pk, kind=kind, pod="").exclude(Exists(held))


def _hold(partition_pk: int, kind: str, placement_id: int, **values: int) -> bool:
    """Hold one partition for a placement if it is free; write ``values`` on it when given."""
    free = _free(partition_pk, kind)
    if values:
        if free.update(**values) != 1:
            return False
        # The partition is the hold's primary key: a racing holder makes this an IntegrityError.
        PartitionHold.objects.create(partition_id=partition_pk, placement_id=placement_id)
        return True
    # One statement instead of a check and an insert: INSERT ... SELECT from ``_free`` inserts the
    # hold only if the partition is still free (and, as above, a racing holder is an IntegrityError).
    rows = free.order_by().values_list("pk", Value(placement_id, output_field=IntegerField()))
    select, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        table = connection.ops.quote_name(PartitionHold._meta.db_table)
        cursor.execute(f"INSERT INTO {table} (partition_id, placement_id) {select}", params)
        return cursor.rowcount == 1


def claim(claim: PartitionClaim, placement_id: int) -> tuple[int, int]:
    """Hold one partition for a placement; return the (milli, MiB) to charge its GPU.

    Raises ``CapacityConflict`` when no candidate row is free any more. Must run in a
    transaction that has locked the claim's GPU (``lock_gpus``).
    """
    if claim.create:
        values = {"share_milli": claim.share_milli, "memory_mib": claim.memory_mib}
        # A left-over free share at our slot (its pod just left) is taken over rather than duplicated.
        for row in claim.candidates:
            if _hold(row.pk, claim.kind, placement_id, **values):
                return claim.share_milli, claim.memory_mib
        partition = Partition.objects.create(gpu_id=claim.gpu_pk, kind=claim.kind, slot=claim.slot, **values)
        PartitionHold.objects.create(partition=partition, placement_id=placement_id)
        return claim.share_milli, claim.memory_mib
    for row in claim.candidates:
        if _hold(row.pk, claim.kind, placement_id):
            memory = claim.memory_mib if claim.kind == PartitionKind.TIMESLICE else row.memory_mib
            return row.share_milli, memory
    raise CapacityConflict(f"GPU {claim.gpu_index}: no free {claim.kind} partition left")


def charge_gpus(charges: dict[int, list[int]]) -> None:
    """Add (milli, MiB) per GPU row; the check constraints refuse an over-allocated counter."""
    for gpu_pk, (milli, memory) in sorted(charges.items()):
        updated = GPU.objects.filter(pk=gpu_pk).update(
            allocated_milli=F("allocated_milli") + milli, allocated_memory_mib=F("allocated_memory_mib") + memory
        )
        if updated != 1:
            raise CapacityConflict(f"GPU {gpu_pk} is gone")


def release_placements(placement_ids: Iterable[int]) -> int:
    """Give back every partition the placements hold; return how many were released.

    Exactly what was charged is subtracted: each partition's share and memory (a time-slice
    replica: its placement's memory). Weighted MPS shares are deleted (they exist only while
    held). Idempotent, and safe against a concurrent release: each hold is removed by a
    conditional delete, and only holds this call removed are subtracted. Must run in a transaction.
    """
    ids = list(placement_ids)
    if not ids:
        return 0
    held = list(
        PartitionHold.objects.filter(placement_id__in=ids).order_by("partition__gpu_id", "partition__slot")
        .values_list("partition_id", "partition__gpu_id", "partition__kind", "partition__share_milli",
                     "partition__memory_mib", "placement_id", "placement__memory_mib")
    )
    lock_gpus(row[1] for row in held)
    charges: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    released = 0
    for pk, gpu_pk, kind, share, memory, placement_id, placement_memory in held:
        if PartitionHold.objects.filter(partition_id=pk, placement_id=placement_id).delete()[0] != 1:
            continue
        if kind == PartitionKind.MPS_WEIGHTED:
            Partition.objects.filter(pk=pk).delete()
        released += 1
        charges[gpu_pk][0] += share
        charges[gpu_pk][1] += placement_memory if kind == PartitionKind.TIMESLICE else memory
    for gpu_pk, (milli, memory) in sorted(charges.items()):
        # Never below zero: inventory sync may have recomputed a counter in between.
        GPU.objects.filter(pk=gpu_pk).update(
            allocated_milli=Greatest(F("allocated_milli") - milli, Value(0)),
            allocated_memory_mib=Greatest(F("allocated_memory_mib") - memory, Value(0)),
        )
    return released


def check_quota(namespace: str) -> None:
    """Refuse (``CapacityConflict``) a reservation that took the namespace over its quota.

    Runs after the claims, in the reservation's transaction, under the exclusive placement lock:
    the use it reads includes this reservation and every committed one, and no other
    reservation can commit in between. A decision made on a use that was stale by then is
    retried, serialised, on the real one (which answers ``NoCapacity`` naming the quota).
    """
    quota = namespace_quota(namespace)
    if quota is None:
        return
    over = []
    if quota.gpu_milli_limit is not None and quota.gpu_milli_used > quota.gpu_milli_limit:
        over.append(f"{gpus(quota.gpu_milli_used)} of {gpus(quota.gpu_milli_limit)}")
    if quota.memory_mib_limit is not None and quota.memory_mib_used > quota.memory_mib_limit:
        over.append(f"{gb(quota.memory_mib_used)} of {gb(quota.memory_mib_limit)}")
    if over:
        raise CapacityConflict(f"namespace {namespace} quota exceeded: {', '.join(over)} with this reservation")

