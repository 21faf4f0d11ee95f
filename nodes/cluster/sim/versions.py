"""resourceVersions and watch history of the simulated cluster, as an API server keeps them.

A cluster-wide counter in the state is bumped on every write of a Node or Pod and stored as the
object's `metadata.resourceVersion`; each write is also appended to a bounded history of events
(ADDED, MODIFIED, DELETED), so a watch from a version still in the history gets what changed after
it, and one from a version that has been compacted away answers 410 Gone, as Kubernetes does.

The simulation changes objects in place from many modules (scheduler, kubelet, controllers,
device plugin, fixtures), so writes are found by comparing each object's JSON before and after
an operation (`snapshot`, then `stamp_writes`), not by touching every writer.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodes.cluster.sim.store import State

# How many writes a watch can be behind before it must list again (Kubernetes keeps ~5 minutes).
MAX_WATCH_EVENTS = 5000
HTTP_GONE = 410
# Watched kinds and their collection in the state.
WATCHED = {"Node": "nodes", "Pod": "pods"}


def _history(state: State) -> dict[str, Any]:
    # version: the counter; compacted: the newest version no longer in `events`.
    return state.setdefault("watch", {"version": 0, "compacted": 0, "events": []})


@dataclass(frozen=True)
class Snapshot:
    """The watched objects as JSON text before an operation, and the counter then."""

    version: int
    texts: dict[str, dict[str, str]]  # kind -> key -> JSON


def snapshot(state: State) -> Snapshot:
    """What `stamp_writes` compares with after the operation."""
    return Snapshot(
        version=_history(state)["version"],
        texts={kind: {key: _text(obj) for key, obj in state[coll].items()} for kind, coll in WATCHED.items()},
    )


def stamping(advance: Callable[[State], None]) -> Callable[[State], None]:
    """`advance` as `StateFile.transaction` calls it (on entry, then on exit), with the objects the
    transaction wrote stamped on exit."""
    before: list[Snapshot] = []

    def advance_and_stamp(state: State) -> None:
        entering = not before
        if entering:
            before.append(snapshot(state))
        advance(state)
        if not entering:
            stamp_writes(state, before[0])

    return advance_and_stamp


def stamp_writes(state: State, before: Snapshot) -> None:
    """Give each Node and Pod added or changed since `before` the next resourceVersion and record
    every addition, change and deletion in the history."""
    history = _history(state)
    if history["version"] < before.version:  # the state was reset: versions never go back
        history.update(version=before.version, compacted=before.version, events=[])
    events = history["events"]
    for kind, coll in WATCHED.items():
        old = before.texts[kind]
        objects = state[coll]
        for key, obj in objects.items():
            text = old.get(key)
            if text is not None and text == _text(obj):
                continue
            history["version"] += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(history["version"])
            events.append([history["version"], kind, "ADDED" if text is None else "MODIFIED", key])
        for key in old.keys() - objects.keys():
            history["version"] += 1
            events.append([history["version"], kind, "DELETED", key])
    if len(events) > MAX_WATCH_EVENTS:
        history["compacted"] = events[-MAX_WATCH_EVENTS - 1][0]
        del events[:-MAX_WATCH_EVENTS]


def list_version(state: State) -> str:
    """The resourceVersion a list of the state is as of."""
    return str(_history(state)["version"])


def watch(state: State, kind: str, since: str) -> list[dict[str, Any]]:
    """The raw watch events ({"type", "object"}, as the API streams them) of `kind` after version
    `since`: each changed object once, as it is now; a BOOKMARK with the current version last; an
    ERROR 410 when `since` is older than the history (or not a version of this state)."""
    history = _history(state)
    try:
        start = int(since)
    except ValueError:
        start = -1
    if start < history["compacted"] or start > history["version"]:
        return [{"type": "ERROR", "object": {
            "kind": "Status", "code": HTTP_GONE, "reason": "Expired",
            "message": f"too old resource version: {since} ({history['compacted'] + 1})"}}]
    latest: dict[str, tuple[int, str]] = {}  # key -> (version, type) of its last event
    for version, event_kind, event_type, key in history["events"]:
        if version > start and event_kind == kind:
            latest.pop(key, None)  # re-inserted: dict order is the order of last events
            latest[key] = (version, event_type)
    objects = state[WATCHED[kind]]
    raw: list[dict[str, Any]] = []
    for key, (version, event_type) in latest.items():
        obj = objects.get(key)
        if obj is None or event_type == "DELETED":
            namespace, _, name = key.rpartition("/")
            meta = {"name": name, "resourceVersion": str(version), **({"namespace": namespace} if namespace else {})}
            raw.append({"type": "DELETED", "object": {"metadata": meta}})
        else:
            raw.append({"type": event_type, "object": obj})
    raw.append({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(history["version"])}}})
    return raw


def _text(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))
