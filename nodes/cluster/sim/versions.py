"""resourceVersions and watch history of the simulated cluster, as an API server keeps them.

A cluster-wide counter in the state is bumped on every write of a Node or Pod and stored as the
object's `metadata.resourceVersion`; each write is also appended to a bounded history of events
(ADDED, MODIFIED, DELETED), so a watch from a version still in the history gets what changed after
it, and one from a version that has been compacted away answers 410 Gone, as Kubernetes does.

The simulation changes objects in place from many modules (scheduler, kubelet, controllers,
device plugin, fixtures), so writes are found by comparing each object serialized before and after
an operation (`snapshot`, then `stamp_writes`), not by touching every writer.
"""
from __future__ import annotations

import marshal
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
    """The watched objects serialized before an operation, and the counter then."""

    version: int
    texts: dict[str, dict[str, bytes]]  # kind -> key -> serialized object


def snapshot(state: State) -> Snapshot:
    """What `stamp_writes` compares with after the operation."""
    return Snapshot(
        version=_history(state)["version"],
        texts={kind: {key: _text(obj) for key, obj in state[coll].items()} for kind, coll in WATCHED.items()},
    )


def stamping(advance: Callable[[State], None]) -> Callable[[State], None]:
    """`advance` as `StateFile.transaction` calls it (on entry, then on exit), with what the
    simulation wrote while catching up on entry stamped before the operation sees the state, and
    what the operation and the exit wrote stamped on exit."""
    before: list[Snapshot] = []

    def advance_and_stamp(state: State) -> None:
        entering = not before
        start = snapshot(state) if entering else before[0]
        advance(state)
        after = stamp_writes(state, start)
        if entering:
            before.append(after)

    return advance_and_stamp


def stamp_writes(state: State, before: Snapshot) -> Snapshot:
    """Give each Node and Pod added or changed since `before` the next resourceVersion, record every
    addition, change and deletion in the history, and return the snapshot of the state now."""
    history = _history(state)
    if history["version"] < before.version:  # the state was reset: versions never go back
        history.update(version=before.version, compacted=before.version, events=[])
    events = history["events"]
    now: dict[str, dict[str, bytes]] = {}
    for kind, coll in WATCHED.items():
        old = before.texts[kind]
        objects = state[coll]
        texts = now[kind] = {}
        for key, obj in objects.items():
            text = old.get(key)
            new_text = _text(obj)
            if text is not None and text == new_text:
                texts[key] = text
                continue
            history["version"] += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(history["version"])
            texts[key] = _text(obj)
            events.append([history["version"], kind, "ADDED" if text is None else "MODIFIED", key])
        for key in old.keys() - objects.keys():
            history["version"] += 1
            events.append([history["version"], kind, "DELETED", key])
    if len(events) > MAX_WATCH_EVENTS:
        history["compacted"] = events[-MAX_WATCH_EVENTS - 1][0]
        del events[:-MAX_WATCH_EVENTS]
    return Snapshot(version=history["version"], texts=now)


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


def _text(obj: dict[str, Any]) -> bytes:
    # marshal, not JSON: the same content gives the same bytes (dict order included), 3x faster.
    return marshal.dumps(obj, 2)  # version 2: no back-references, so equal content, equal bytes
