"""Watch events as the Kubernetes API streams them ({"type", "object"} JSON) -> `Changes`.

Both backends hand their raw events here, as they hand raw objects to `nodes.cluster.parsing`, so
the simulated cluster's watch is read exactly as a real one's: BOOKMARK only moves the version,
ERROR 410 means the version is too old (`ResourceVersionGone`), any other ERROR is a ClusterError.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nodes.cluster.base import (
    Changes,
    ClusterError,
    ClusterItem,
    ClusterNode,
    ClusterPod,
    ResourceVersionGone,
    WatchEvent,
)
from nodes.cluster.parsing import parse_node, parse_pod

HTTP_GONE = 410
_EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")


def node_changes(raw_events: Iterable[dict[str, Any]], since: str, what: str) -> Changes[ClusterNode]:
    """The node events of a watch started at `since`; `what` names the watch in errors."""
    return _changes(raw_events, since, what, lambda meta: meta["name"], parse_node)


def pod_changes(raw_events: Iterable[dict[str, Any]], since: str, what: str) -> Changes[ClusterPod]:
    """The GPU pod events of a watch started at `since`: a pod that asks for no GPU reads as gone."""
    return _changes(
        raw_events, since, what, lambda meta: f"{meta.get('namespace', 'default')}/{meta['name']}", parse_pod
    )


def _changes(
    raw_events: Iterable[dict[str, Any]],
    since: str,
    what: str,
    key_of: Callable[[dict[str, Any]], str],
    parse: Callable[[dict[str, Any]], ClusterItem | None],
) -> Changes[ClusterItem]:
    events: list[WatchEvent[ClusterItem]] = []
    version = since
    for raw in raw_events:
        kind = raw.get("type")
        obj = raw.get("object") or {}
        if kind == "ERROR":
            code, message = obj.get("code"), obj.get("message", "")
            if code == HTTP_GONE:
                raise ResourceVersionGone(f"{what} from resourceVersion {since}: 410 Gone: {message}")
            raise ClusterError(f"{what} from resourceVersion {since}: {code} {obj.get('reason', '')}: {message}")
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or version)
        if kind not in _EVENT_TYPES:
            continue  # BOOKMARK: nothing changed up to `version`
        item = None if kind == "DELETED" else parse(obj)
        events.append(WatchEvent(type=kind, key=key_of(meta), item=item, resource_version=version))
    return Changes(events=events, resource_version=version)
