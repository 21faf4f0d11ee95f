"""This process's long-lived cluster snapshot, brought up to date from the change log.

Rebuilding the snapshot of every node, GPU and partition on each deploy was most of a deploy's
time (seconds at 5,000 nodes). Instead each process keeps one ``InventorySnapshot`` and, before
each decision, reads the change log (``SnapshotChange``, written by database triggers in the
transaction of every capacity change: see ``scheduler.snapshot_triggers``) from its generation on,
and rebuilds only the nodes named there: once before the placement lock (``prepare``: the costly
part, rebuilt nodes or a full rebuild, is not paid under the lock) and again under it
(``lease``, which hands the snapshot out for one decision: typically one log read).

Why it cannot go stale:

- Generation: the highest log id read so far. A log id is taken when the row is written, not
  when it commits, so on PostgreSQL a transaction still open at the last read may commit a
  lower id later: the reader keeps the ids of the transactions its last read saw in progress
  (``pg_snapshot_xip``) and re-reads their rows next time. SQLite serialises writers.
- A decision changes the snapshot it is made on (each replica sees the ones before it; a failed
  request un-reserves). The nodes it touched are rebuilt from the database on the next lease,
  whether its transaction committed or rolled back.
- Full rebuild instead of an update: on first use, when the log was trimmed past the
  generation or emptied (``flush``), when the last refresh is older than half the log's
  retention, when nodes were added, removed or renamed (node order is by name), when more than
  a quarter of the nodes changed (a telemetry poll: one query beats an ``IN`` list), and on a
  placement's third attempt. Without the triggers (a migration that rebuilt a table on SQLite
  before ``post_migrate`` re-created them) the cache is not used at all.
- A decision on a stale snapshot cannot over-allocate: the reservation's conditional updates
  and constraints still refuse it, and the retry decides on a refreshed snapshot.

A lease must be taken inside the transaction that holds the exclusive placement lock (see
``capacity``), outside any outer transaction that has written (the services bypass the cache
there: its rows are not committed, and may never be). A thread lock guards the object itself.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from scheduler import snapshot_triggers
from scheduler.adapters import InventorySnapshot, SnapshotIndex, build_snapshot, read_nodes_by_pk
from scheduler.core import Assignment, ClusterSnapshot, NodeState
from scheduler.models import SnapshotChange

logger = logging.getLogger(__name__)

# How long log rows are kept (``trim_changes``); a snapshot not refreshed for half of it is rebuilt.
RETENTION = timedelta(minutes=10)
# More changed nodes than this share of the snapshot: rebuild it whole.
REBUILD_SHARE = 0.25
# Per-request tables of static filters (``ClusterSnapshot.static_cache``) kept at most.
STATIC_CACHE_MAX = 4096


class TrackedSnapshot(ClusterSnapshot):
    """A ``ClusterSnapshot`` that remembers which nodes decisions reserved or released on."""

    def __init__(self, nodes: Iterable[NodeState]) -> None:
        super().__init__(nodes)
        self.touched: set[str] = set()

    def reserve(self, assignment: Assignment) -> None:
        self.touched.add(assignment.node)
        super().reserve(assignment)

    def release(self, node: str, key: str) -> int:
        self.touched.add(node)
        return super().release(node, key)


@dataclass
class Changes:
    """What one read of the log found: nodes changed since the generation, and the log's state."""

    node_pks: set[int] = field(default_factory=set)
    newest: int | None = None
    oldest: int | None = None
    pending: tuple[int, ...] = ()


def read_changes(generation: int, pending: tuple[int, ...]) -> Changes:
    """Nodes logged after ``generation`` or by the ``pending`` transactions, in one statement.

    Also the log's lowest and highest id, and (PostgreSQL) the transactions in progress as this
    statement saw them, whose rows may still commit with ids at or below its highest.
    """
    table = SnapshotChange._meta.db_table
    changes = Changes()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"SELECT s.newest, s.oldest, s.xip, c.node_id FROM (SELECT "
                f"(SELECT max(id) FROM {table}) AS newest, (SELECT min(id) FROM {table}) AS oldest, "
                f"ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(pg_current_snapshot()) AS x) AS xip) AS s "
                f"LEFT JOIN (SELECT DISTINCT node_id FROM {table} WHERE id > %s OR txid = ANY(%s::bigint[])) AS c "
                f"ON TRUE",
                [generation, list(pending)],
            )
        else:
            cursor.execute(
                f"SELECT (SELECT max(id) FROM {table}), (SELECT min(id) FROM {table}), NULL, c.node_id "
                f"FROM (SELECT 1) AS s LEFT JOIN (SELECT DISTINCT node_id FROM {table} WHERE id > %s) AS c ON 1",
                [generation],
            )
        for newest, oldest, xip, node_pk in cursor.fetchall():
            changes.newest, changes.oldest, changes.pending = newest, oldest, tuple(xip or ())
            if node_pk is not None:
                changes.node_pks.add(node_pk)
    return changes


@dataclass
class _NodeKeys:
    """The index entries of one node, so that a rebuilt node replaces exactly its own."""

    gpu: list[tuple[str, int]] = field(default_factory=list)
    free: list[tuple[str, int, str]] = field(default_factory=list)
    mig: list[tuple[str, int, int]] = field(default_factory=list)


def _keys_by_node(index: SnapshotIndex) -> dict[str, _NodeKeys]:
    keys: dict[str, _NodeKeys] = {name: _NodeKeys() for name in index.node_pk}
    for gpu_key in index.gpu_pk:
        keys[gpu_key[0]].gpu.append(gpu_key)
    for free_key in index.free_rows:
        keys[free_key[0]].free.append(free_key)
    for mig_key in index.mig_rows:
        keys[mig_key[0]].mig.append(mig_key)
    return keys


class SnapshotCache:
    """One process's snapshot and where it stands in the change log (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self.inventory: InventorySnapshot | None = None
        self.generation = 0
        self.pending: tuple[int, ...] = ()
        self.refreshed_at = 0.0
        self.dirty: set[str] = set()
        self._keys: dict[str, _NodeKeys] = {}
        self._names: dict[int, str] = {}
        self.rebuilds = 0
        self.updates = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        """This thread's turn at the snapshot, held across a whole decision and its commit.

        Taken before the placement lock: the threads of one process queue here, not while
        holding the cluster-wide lock (where the holder would wait for another thread's
        ``prepare``).
        """
        with self._lock:
            yield

    def invalidate(self) -> None:
        """Forget the snapshot: the next lease rebuilds it."""
        with self._lock:
            self.inventory = None

    def prepare(self) -> None:
        """Bring the snapshot up to date before the caller takes the placement lock.

        A full rebuild (first use, a telemetry poll that changed every node) takes seconds at
        fleet scale, and rebuilding a node takes queries: done here, every other deploy does not
        wait for it under the lock, where the lease then applies only what changed meanwhile.
        """
        with self._lock:
            self.refresh()

    @contextmanager
    def lease(self, *, full: bool = False) -> Iterator[InventorySnapshot]:
        """The up-to-date snapshot for one decision (rebuilt whole when ``full``).

        What the decision reserves or releases on it is rebuilt from the database next time.
        """
        with self._lock:
            inventory = self.refresh(full=full)
            snapshot = inventory.snapshot
            assert isinstance(snapshot, TrackedSnapshot)
            snapshot.touched.clear()
            try:
                yield inventory
            finally:
                self.dirty |= snapshot.touched

    def refresh(self, *, full: bool = False) -> InventorySnapshot:
        """Bring the snapshot up to date; the caller holds ``_lock`` (or owns the cache)."""
        try:
            inventory = self._refresh(full)
            assert inventory is not None  # rebuilt when it could not be updated
            return inventory
        except BaseException:
            self.inventory = None  # half updated (a query failed): rebuilt next time
            raise

    def keep_warm(self) -> None:
        """Bring the snapshot up to date between decisions (the web workers' warmer thread).

        What a decision would apply incrementally is applied here under the lock; a full
        rebuild (first use, a telemetry poll that changed every node) is built *outside* the
        lock, so deploys keep deciding on the current snapshot meanwhile, then swapped in and
        caught up from the log position read before it.
        """
        if not snapshot_triggers.installed(connection):
            return
        with self._lock:
            if self.inventory is None:  # nothing to decide on meanwhile: deploys wait for this build
                self.refresh()
                return
            if self._refresh(False, rebuild=False) is not None:
                return
        changes = read_changes(2**62, ())
        inventory = build_snapshot(snapshot_class=TrackedSnapshot)
        with self._lock:
            self._install(inventory, changes)
            try:
                self._refresh(False, rebuild=False)  # what changed while it was built
            except BaseException:
                self.inventory = None
                raise

    def _refresh(self, full: bool, *, rebuild: bool = True) -> InventorySnapshot | None:
        """Up to date; None instead of a full rebuild when ``rebuild`` is False."""
        inventory = self.inventory
        if (full or inventory is None or self._clock() - self.refreshed_at > RETENTION.total_seconds() / 2):
            return self._rebuild() if rebuild else None
        changes = read_changes(self.generation, self.pending)
        if changes.newest is None and self.generation:
            return self._rebuild() if rebuild else None  # the log was emptied (flush)
        if changes.newest is not None and (changes.newest < self.generation
                                           or (changes.oldest or 0) > self.generation + 1):
            return self._rebuild() if rebuild else None  # reset, or trimmed past our generation
        node_pks = changes.node_pks | {inventory.index.node_pk[name] for name in self.dirty
                                       if name in inventory.index.node_pk}
        if len(node_pks) > REBUILD_SHARE * max(len(inventory.snapshot), 1) or not self._update(inventory, node_pks):
            return self._rebuild() if rebuild else None
        self.generation = max(self.generation, changes.newest or 0)
        self.pending = changes.pending
        self.refreshed_at = self._clock()
        self.dirty.clear()
        if len(inventory.snapshot.static_cache) > STATIC_CACHE_MAX:
            inventory.snapshot.static_cache.clear()
        return inventory

    def _rebuild(self) -> InventorySnapshot:
        self.inventory = None
        if not snapshot_triggers.installed(connection):
            # Not kept: without the log nothing would tell this snapshot that it went stale.
            logger.warning("snapshot change-log triggers missing (run `manage.py migrate`): rebuilding per decision")
            return build_snapshot(snapshot_class=TrackedSnapshot)
        # Where the log stands is read before the rows: a change committed in between is re-read.
        changes = read_changes(2**62, ())
        inventory = build_snapshot(snapshot_class=TrackedSnapshot)
        self._install(inventory, changes)
        self.dirty.clear()
        return inventory

    def _install(self, inventory: InventorySnapshot, changes: Changes) -> None:
        """Make ``inventory``, built from rows read after ``changes``, the snapshot."""
        self.generation, self.pending = changes.newest or 0, changes.pending
        self._keys = _keys_by_node(inventory.index)
        self._names = {pk: name for name, pk in inventory.index.node_pk.items()}
        self.refreshed_at = self._clock()
        self.inventory = inventory
        self.rebuilds += 1

    def _update(self, inventory: InventorySnapshot, node_pks: set[int]) -> bool:
        """Rebuild ``node_pks`` in place; False when the set of nodes changed (rebuild whole)."""
        if not node_pks:
            return True
        states, index = read_nodes_by_pk(node_pks)
        found = {pk: name for name, pk in index.node_pk.items()}
        if any(pk in self._names and pk not in found for pk in node_pks):
            return False  # removed
        if any(self._names.get(pk) != name for pk, name in found.items()):
            return False  # added or renamed
        fresh = _keys_by_node(index)
        for state in states:
            name = state.name
            old = self._keys[name]
            for gpu_key in old.gpu:
                del inventory.index.gpu_pk[gpu_key]
            for free_key in old.free:
                del inventory.index.free_rows[free_key]
            for mig_key in old.mig:
                del inventory.index.mig_rows[mig_key]
            new = fresh[name]
            for gpu_key in new.gpu:
                inventory.index.gpu_pk[gpu_key] = index.gpu_pk[gpu_key]
            for free_key in new.free:
                inventory.index.free_rows[free_key] = index.free_rows[free_key]
            for mig_key in new.mig:
                inventory.index.mig_rows[mig_key] = index.mig_rows[mig_key]
            self._keys[name] = new
            inventory.snapshot.update_node(state)
        self.updates += 1
        return True


# The process's cache: gunicorn workers and Celery workers each have their own.
SNAPSHOTS = SnapshotCache()


def usable() -> bool:
    """Whether the current code path may use ``SNAPSHOTS``: not inside an outer transaction."""
    return not connection.in_atomic_block


def trim_changes(now: datetime | None = None) -> int:
    """Delete log rows older than ``RETENTION``, always keeping the newest; return how many."""
    cutoff = (now or timezone.now()) - RETENTION
    newest = SnapshotChange.objects.order_by("-id").values_list("id", flat=True).first()
    if newest is None:
        return 0
    deleted, _ = SnapshotChange.objects.filter(created_at__lt=cutoff, id__lt=newest).delete()
    return deleted


__all__ = ["RETENTION", "SNAPSHOTS", "Changes", "SnapshotCache", "TrackedSnapshot", "read_changes", "trim_changes",
           "usable"]
