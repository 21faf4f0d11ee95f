"""The simulated cluster's state file: Kubernetes-shaped JSON shared by web, worker and beat processes.

Each process opens its own SimulatedCluster on one file, so the cluster lives on disk, not in
memory. Every call locks a side lock file (`<state>.lock`) with an exclusive `fcntl.flock`, reads
the state, lets the simulation catch up with the clock, works on it and replaces the file
atomically: readers see the old or the new state, never half of one, and concurrent writers lose
no update.

Parsing is most of a call's cost on a big fleet (12 MB of JSON at 5,000 nodes), so each process
keeps the state it last read or wrote, with the file's identity (inode, size, mtime) and the
write token that every writer leaves in the lock file: under the lock, a state whose file and
token are unchanged is what the file holds, and is used without parsing. A call that raises
drops it (the block may have changed it in place), so the next call reads the file again.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodes.cluster.base import ClusterError

STATE_VERSION = 1

# The whole cluster as one JSON document; see `empty_state` for its layout.
State = dict[str, Any]


def empty_state() -> State:
    """A cluster with nothing in it.

    Kubernetes objects are kept as the API server would return them: "nodes" by name, "pods",
    "deployments", "pdbs" and "configmaps" by "namespace/name". "faults" holds the queued
    injected faults per operation, "events" the latest simulator events, "counter" a sequence
    for pod creation order and generated names.
    """
    return {
        "version": STATE_VERSION,
        "counter": 0,
        "nodes": {},
        "pods": {},
        "deployments": {},
        "pdbs": {},
        "configmaps": {},
        "faults": {},
        "events": [],
        # Simulator bookkeeping a real API server would not show: the running plugin config,
        # MIG manager progress, pod bind times and controllers.
        "sim": {"nodes": {}, "pods": {}},
    }


@dataclass
class _Cached:
    """The state a process last read or wrote, and how to tell that the file still holds it."""

    identity: tuple[int, int, int]  # inode, size, mtime of the state file
    token: str  # the write token in the lock file
    text: str  # the file's content, to tell whether a call changed the state
    state: State


# By resolved state path: every SimulatedCluster of a process on one file shares it.
_cache: dict[Path, _Cached] = {}


class StateFile:
    """The state at `path`, read-modify-written under a lock on the sibling file `<name>.lock`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    @contextmanager
    def transaction(self, advance: Callable[[State], None]) -> Iterator[State]:
        """Lock, load and `advance` the state; on normal exit advance it again and save it if it changed.

        A missing or empty file is an empty cluster. An exception inside the block discards every
        change made in it. Raises ClusterError when the file is corrupt or not a state file of
        this version.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        key = self.path.resolve()
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                lock.seek(0)
                token = lock.read()
                cached = _cache.pop(key, None)  # changed in place below: put back only on success
                if cached is not None and cached.token == token and cached.identity == self._identity():
                    raw, state = cached.text, cached.state
                else:
                    raw = self._read()
                    state = json.loads(raw) if raw.strip() else empty_state()
                if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
                    raise ClusterError(f"{self.path} is not a simulated cluster state file (version {STATE_VERSION})")
                advance(state)
                yield state
                advance(state)
                # Compact JSON: the C encoder only serves indent=None, and this runs on every call.
                text = json.dumps(state, separators=(",", ":"))
                if text != raw:
                    self._write(text)
                    token = uuid.uuid4().hex
                    lock.seek(0)
                    lock.truncate()
                    lock.write(token)
                    lock.flush()
                identity = self._identity()
                if identity is not None:
                    _cache[key] = _Cached(identity, token, text, state)
            except json.JSONDecodeError as exc:
                raise ClusterError(f"{self.path} is corrupt: {exc}") from None
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def _read(self) -> str:
        try:
            return self.path.read_text()
        except FileNotFoundError:
            return ""

    def _write(self, text: str) -> None:
        # Write a sibling temp file and rename it over the state: readers see the old or the new
        # state, never half of one. No fsync: the simulator needs process-crash safety only.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
