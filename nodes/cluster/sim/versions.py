"""resourceVersions and watches of the simulated cluster, as an API server serves them.

The store gives every object it writes the next value of one cluster-wide counter, which Nodes and
Pods show as `metadata.resourceVersion`, and keeps a deleted object's row (without a body) for a
while (`store.TOMBSTONE_VERSIONS`). So a list is as of the version its call started from, and a
watch from a version answers with each object written since, as it is now: ADDED when it was
created since (the store keeps each object's creation version), else MODIFIED, or DELETED; a version
older than the oldest deletion kept answers 410 Gone, as Kubernetes does once it has compacted it.

Objects written by the call that answers (the simulation catching up with the clock) are
committed with newer versions, so the next watch sees them: at least once, never missed.
"""
from __future__ import annotations

from typing import Any

from nodes.cluster.sim.store import State, StateFile

HTTP_GONE = 410
# Watched kinds and their collection in the state.
WATCHED = {"Node": "nodes", "Pod": "pods"}


def list_version(state: State) -> str:
    """The resourceVersion a list of the state is as of."""
    return str(state.version_seen)


def watch(state_file: StateFile, state: State, kind: str, since: str) -> list[dict[str, Any]]:
    """The raw watch events ({"type", "object"}, as the API streams them) of `kind` after version
    `since`: each changed object once, as it is now (ADDED when created after `since`); a BOOKMARK with the current version last; an
    ERROR 410 when `since` is older than the deletions kept (or not a version of this state)."""
    try:
        start = int(since)
    except ValueError:
        start = -1
    rows = state_file.written_since(WATCHED[kind], start) if 0 <= start <= state.version_seen else None
    if rows is None:
        return [{"type": "ERROR", "object": {
            "kind": "Status", "code": HTTP_GONE, "reason": "Expired",
            "message": f"too old resource version: {since}"}}]
    objects = state[WATCHED[kind]]
    raw: list[dict[str, Any]] = []
    for key, version, deleted, created in rows:
        obj = None if deleted else dict.get(objects, key)
        if obj is None:
            namespace, _, name = key.rpartition("/")
            meta = {"name": name, "resourceVersion": str(version), **({"namespace": namespace} if namespace else {})}
            raw.append({"type": "DELETED", "object": {"metadata": meta}})
        else:
            # Kubernetes streams every event; one per object as it is now folds an object created
            # since (then perhaps changed) into its ADDED, as a watcher that never saw it expects.
            raw.append({"type": "ADDED" if created else "MODIFIED", "object": obj})
    raw.append({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(state.version_seen)}}})
    return raw
