"""The simulated cluster's store: one SQLite row per object, shared by web, worker and beat processes.

Each process opens its own SimulatedCluster on one state file, so the cluster lives on disk, not
in memory. The file is an SQLite database in WAL mode with one row per object (collection, key,
version, JSON body, version it was created at); every write gives the row the next value of one
cluster-wide counter, which Kubernetes-shaped objects also show as `metadata.resourceVersion`. A
deleted object leaves a row without a body, so other processes learn of the deletion (kept
`TOMBSTONE_VERSIONS` versions). The creation version lets a watch tell ADDED from MODIFIED.

A call costs what it touches, not the size of the cluster: each process keeps the objects it
parsed (`State`, the programming model of the simulation modules) and, at the start of each
transaction, reads only the rows whose version moved since it last looked. The collections
remember which keys a call set, deleted or handed out (`Collection`); at the end only those are
serialised, and only the ones whose JSON changed are written back. A call that only reads writes
nothing. Code that mutates an object must get it by `collection[key]` (or `get`, `setdefault`,
`pop`); iteration and `peek` hand objects out read-only. `VERIFY` (the simulator's tests set it)
checks that at every commit.

Writers are serialised by an exclusive `fcntl.flock` on `<state>.lock` and `BEGIN IMMEDIATE`:
the flock wakes the next waiter as soon as the lock is free, where SQLite's busy handler sleeps
up to 100 ms between retries. An exception inside a transaction rolls back the database and puts
the touched objects back as they were stored.

A state file from before this store (one JSON document) is converted once, under the lock.
"""
from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.cluster.base import ClusterError
from nodes.cluster.sim.state import (
    KUBERNETES_COLLECTIONS,
    META,
    SIM_COLLECTIONS,
    STATE_VERSION,
    TOP_COLLECTIONS,
    Collection,
    State,
    empty_state,
    structure_key,
)

__all__ = ["Collection", "State", "StateFile", "empty_state"]

_SQLITE_HEADER = b"SQLite format 3\x00"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    coll TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, body TEXT, created INTEGER,
    PRIMARY KEY (coll, key)
);
CREATE INDEX IF NOT EXISTS objects_by_version ON objects (version);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# Rows of deleted objects are kept this many versions, for other processes to see the deletion;
# a process that looked longer ago reads everything again.
TOMBSTONE_VERSIONS = 20_000
# Check at every commit that no object changed without being handed out for mutation, and that
# the indexes match the objects (costs a full serialisation: tests only).
VERIFY = False
_MISSING = object()
# A write keeps the row's creation version, unless the object is new or made again after its
# deletion (the row had no body): then it was created by this write.
_UPSERT = (
    "INSERT INTO objects (coll, key, version, body, created) VALUES (?, ?, ?, ?, ?) ON CONFLICT (coll, key) "
    "DO UPDATE SET version = excluded.version, body = excluded.body, "
    "created = CASE WHEN objects.body IS NULL THEN excluded.created ELSE objects.created END"
)



@dataclass
class _Replica:
    """What a process keeps of one state file: the objects, their stored JSON, the version seen."""

    epoch: str
    seen: int = 0
    state: State = field(default_factory=State)
    # A missing row of "counter" or "events" is the empty state's value.
    texts: dict[tuple[str, str], str] = field(default_factory=lambda: {(META, "counter"): "0", (META, "events"): "[]"})


# By resolved state path: every SimulatedCluster of a process on one file shares it.
_replicas: dict[Path, _Replica] = {}
# By (resolved path, process id): a connection must not cross a fork; with the file's inode, as a
# file deleted and made again is another database.
_connections: dict[tuple[Path, int], tuple[sqlite3.Connection, int]] = {}


def dumps(value: Any) -> str:
    # Compact JSON: the C encoder only serves indent=None.
    return json.dumps(value, separators=(",", ":"))


class StateFile:
    """The state at `path`, read-modify-written under a lock on the sibling file `<name>.lock`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._key = self.path.resolve()

    @contextmanager
    def transaction(self, advance: Callable[[State], None]) -> Iterator[State]:
        """Lock, bring the state up to date and `advance` it; on normal exit advance it again and
        write back the objects that changed.

        A missing or empty file is an empty cluster. An exception inside the block discards every
        change made in it. Raises ClusterError when the file is corrupt or not a state file.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        key = self._key
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                connection = self._connect(key)
                connection.execute("BEGIN IMMEDIATE")
                replica: _Replica | None = None
                try:
                    replica = self._catch_up(connection, key)
                    state = replica.state
                    advance(state)
                    yield state
                    advance(state)
                    _commit(connection, replica)
                except BaseException:
                    connection.execute("ROLLBACK")
                    if replica is not None:
                        _restore(replica)
                    raise
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _connect(self, key: Path) -> sqlite3.Connection:
        known = _connections.pop((key, os.getpid()), None)
        if known is not None:
            if _inode(self.path) == known[1]:
                _connections[(key, os.getpid())] = known
                return known[0]
            known[0].close()
        self._convert_json_file()
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            # Process-crash safety is all the simulator needs: no fsync per commit.
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA busy_timeout=60000")
            connection.executescript(_SCHEMA)
            if "created" not in {column[1] for column in connection.execute("PRAGMA table_info(objects)")}:
                # A file from before creation versions: its objects read as created before any watch.
                connection.execute("ALTER TABLE objects ADD COLUMN created INTEGER")
            connection.execute("INSERT OR IGNORE INTO meta VALUES ('epoch', ?), ('version', '0')", (uuid.uuid4().hex,))
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise ClusterError(f"{self.path} is corrupt: {exc}") from None
        _connections[(key, os.getpid())] = (connection, _inode(self.path))
        return connection

    def _catch_up(self, connection: sqlite3.Connection, key: Path) -> _Replica:
        """This process's objects for the file, after applying every row written since it last looked."""
        meta = dict(connection.execute("SELECT name, value FROM meta WHERE name IN ('epoch', 'version', 'purged')"))
        replica = _replicas.get(key)
        if replica is None or replica.epoch != meta["epoch"] or replica.seen < int(meta.get("purged", 0)):
            replica = _replicas[key] = _Replica(epoch=meta["epoch"])
        if int(meta["version"]) > replica.seen:
            rows = connection.execute(
                "SELECT coll, key, version, body FROM objects WHERE version > ?", (replica.seen,)
            ).fetchall()
            _apply_rows(replica, rows)
            replica.seen = int(meta["version"])
        replica.state.version_seen = replica.seen
        return replica

    def written_since(self, collection: str, version: int) -> list[tuple[str, int, bool, bool]] | None:
        """(key, version, deleted, created) of each object of `collection` last written after `version`,
        oldest first, as committed (created: the object did not exist at `version`, or was deleted
        since and made again); None when deletions that old are no longer kept. Inside `transaction` only."""
        connection = _connections[(self._key, os.getpid())][0]
        purged = connection.execute("SELECT value FROM meta WHERE name = 'purged'").fetchone()
        if purged is not None and version < int(purged[0]):
            return None
        rows = connection.execute(
            "SELECT key, version, body IS NULL, coalesce(created, 0) > ? FROM objects"
            " WHERE coll = ? AND version > ? ORDER BY version",
            (version, collection, version),
        )
        return [(key, row_version, bool(deleted), bool(created)) for key, row_version, deleted, created in rows]

    def _convert_json_file(self) -> None:
        """Replace a JSON state file (this simulator's earlier format) by the same state as a database."""
        try:
            with open(self.path, "rb") as handle:
                head = handle.read(len(_SQLITE_HEADER))
        except FileNotFoundError:
            return
        if not head or head == _SQLITE_HEADER:
            return
        try:
            document = json.loads(self.path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ClusterError(f"{self.path} is corrupt: {exc}") from None
        if not isinstance(document, dict) or document.get("version") != STATE_VERSION:
            raise ClusterError(f"{self.path} is not a simulated cluster state file (version {STATE_VERSION})")
        rows = list(_document_rows(document))
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        try:
            connection = sqlite3.connect(tmp, isolation_level=None)
            connection.executescript(_SCHEMA)
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO objects (coll, key, version, body, created) VALUES (?, ?, ?, ?, ?)",
                ((coll, key, version, body, version) for version, (coll, key, body) in enumerate(rows, start=1)),
            )
            connection.execute("INSERT INTO meta VALUES ('epoch', ?), ('version', ?)", (uuid.uuid4().hex, str(len(rows))))
            connection.execute("COMMIT")
            connection.close()
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _inode(path: Path) -> int:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return -1


def _document_rows(document: dict[str, Any]) -> Iterable[tuple[str, str, str]]:
    """(collection, key, JSON) for every object of a JSON state document."""
    for name in TOP_COLLECTIONS:
        for key, obj in (document.get(name) or {}).items():
            yield name, key, dumps(obj)
    for name in SIM_COLLECTIONS:
        for key, obj in ((document.get("sim") or {}).get(name) or {}).items():
            yield f"sim.{name}", key, dumps(obj)
    for key, value in document.items():
        if not structure_key(key):
            yield META, key, dumps(value)


def _apply_rows(replica: _Replica, rows: list[tuple[str, str, int, str | None]]) -> None:
    """Put rows read from the database into the process's objects (None: the object was deleted)."""
    state = replica.state
    for coll, key, _version, body in rows:
        if coll == META:
            if body is None:
                dict.pop(state, key, None)
            else:
                dict.__setitem__(state, key, json.loads(body))
        else:
            collection = state.collection(coll)
            collection.unsynced.add(key)
            if body is None:
                dict.pop(collection, key, None)
            else:
                dict.__setitem__(collection, key, json.loads(body))
        if body is None:
            replica.texts.pop((coll, key), None)
        else:
            replica.texts[(coll, key)] = body


def _changes(replica: _Replica) -> list[tuple[str, str, Any]]:
    """(collection, key, object or _MISSING) for every touched object whose JSON is not what is stored."""
    state, texts = replica.state, replica.texts
    changed: list[tuple[str, str, Any]] = []
    for collection in state.collections():
        for key in collection.touched:
            obj = dict.get(collection, key, _MISSING)
            stored = texts.get((collection.name, key))
            if obj is _MISSING:
                if stored is not None:
                    changed.append((collection.name, key, _MISSING))
            elif stored is None or dumps(obj) != stored:
                changed.append((collection.name, key, obj))
    for key in state.touched:
        value = dict.get(state, key, _MISSING)
        stored = texts.get((META, key))
        if value is _MISSING:
            if stored is not None:
                changed.append((META, key, _MISSING))
        elif stored is None or dumps(value) != stored:
            changed.append((META, key, value))
    return changed


def _commit(connection: sqlite3.Connection, replica: _Replica) -> None:
    """Write back the touched objects that changed, each with the next version, and commit."""
    if VERIFY:
        _verify(replica)
    rows: list[tuple[str, str, int, str | None, int]] = []
    version = replica.seen
    for coll, key, obj in _changes(replica):
        version += 1
        if obj is _MISSING:
            rows.append((coll, key, version, None, version))
            continue
        if coll in KUBERNETES_COLLECTIONS and isinstance(obj.get("metadata"), dict):
            obj["metadata"]["resourceVersion"] = str(version)
        rows.append((coll, key, version, dumps(obj), version))
    if rows:
        connection.executemany(_UPSERT, rows)
        connection.execute("UPDATE meta SET value = ? WHERE name = 'version'", (str(version),))
        if version // TOMBSTONE_VERSIONS > replica.seen // TOMBSTONE_VERSIONS:
            # Once per TOMBSTONE_VERSIONS writes: forget deletions older than that.
            purged = version - TOMBSTONE_VERSIONS
            connection.execute("DELETE FROM objects WHERE body IS NULL AND version <= ?", (purged,))
            connection.execute("INSERT OR REPLACE INTO meta VALUES ('purged', ?)", (str(purged),))
    connection.execute("COMMIT")
    # Only once committed: a failed write restores the touched objects from what is stored.
    for coll, key, _version, body, _created in rows:
        if body is None:
            replica.texts.pop((coll, key), None)
        else:
            replica.texts[(coll, key)] = body
    replica.seen = version
    _forget_marks(replica.state)
    replica.state.indexes.changed_deployments.clear()


def _restore(replica: _Replica) -> None:
    """Put every object the failed transaction touched back as it is stored."""
    state, texts = replica.state, replica.texts
    for collection in state.collections():
        for key in collection.touched:
            stored = texts.get((collection.name, key))
            if stored is None:
                dict.pop(collection, key, None)
            else:
                dict.__setitem__(collection, key, json.loads(stored))
            collection.unsynced.add(key)
    for key in state.touched:
        stored = texts.get((META, key))
        if stored is None:
            dict.pop(state, key, None)
        else:
            dict.__setitem__(state, key, json.loads(stored))
    _forget_marks(state)


def _forget_marks(state: State) -> None:
    state.touched.clear()
    for collection in state.collections():
        collection.touched.clear()


def _verify(replica: _Replica) -> None:
    """AssertionError when an object changed without being handed out, or an index is stale."""
    state, texts = replica.state, replica.texts
    for collection in state.collections():
        for key, obj in dict.items(collection):
            if key not in collection.touched and dumps(obj) != texts.get((collection.name, key)):
                raise AssertionError(f"{collection.name} {key!r} changed without being handed out for mutation")
    for key in state.meta_keys():
        if key not in state.touched and dumps(dict.__getitem__(state, key)) != texts.get((META, key)):
            raise AssertionError(f"state[{key!r}] changed without being marked")
    state.indexes.check(state)
