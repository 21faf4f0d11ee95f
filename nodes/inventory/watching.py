"""What inventory sync reads from the cluster: everything (a relist), or only what changed (a watch).

On a backend that can watch (`WatchableCluster`), each process keeps a mirror of the cluster's
nodes and GPU pods with the resourceVersions they were read at, as a Kubernetes informer does.
A sync watches from those versions and syncs only the nodes that changed, or whose pods did;
with no events there is nothing to sync and no row is read or written. It relists, and syncs
every node, the first time and when `relist` is asked (to repair rows changed behind its back).
After 410 Gone it relists but, the rows being as the mirror says, syncs only the nodes whose
resourceVersions (or whose pods') differ from the mirror's.

The database records the versions its rows were synced at (`InventoryWatch`) with a generation
that each move of them raises by one, compare-and-set: a sync moves generation g only if it read
g, and read the cluster after reading it. So a higher generation was read from the cluster later
than the mirror was, without comparing resourceVersions (Kubernetes allows only equality). When
another process synced since (the stored generation is higher than the mirror's), the process
catches up by watching from its mirror's versions: every object changed since the rows' versions
changed since the mirror's too, so syncing the nodes of those events (compared, written only where
they differ) leaves the rows right. A lower generation, or the same one at other versions, means
the rows were rolled back or restored (or the record deleted): the mirror cannot tell what they
lack, and the sync relists.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from django.utils import timezone

from nodes.cluster.base import (
    ClusterBackend,
    ClusterItem,
    ClusterNode,
    ClusterPod,
    ResourceVersionGone,
    WatchableCluster,
)
from nodes.models import InventoryWatch

# How long a watch waits for events; the sync runs on a beat, so it takes what is there and goes.
WATCH_TIMEOUT_S = 1.0


@dataclass
class ClusterMirror:
    """A process's copy of the cluster's nodes and GPU pods, as of two resourceVersions."""

    key: str
    nodes: dict[str, ClusterNode]  # by name, all nodes (a CPU node may gain GPUs)
    pods: dict[str, ClusterPod]  # by "namespace/name"
    nodes_version: str
    pods_version: str
    generation: int = 0  # the stored record's generation that these versions are (set by `remember`)

    @property
    def versions(self) -> tuple[str, str]:
        return self.nodes_version, self.pods_version


# By cluster key: resourceVersions mean something only within one cluster.
_mirrors: dict[str, ClusterMirror] = {}


@dataclass
class ClusterReading:
    """What one sync read: the GPU nodes and pods to sync, and which nodes they are."""

    observed: list[ClusterNode]  # the GPU nodes in scope
    pods: list[ClusterPod]  # the pods in scope
    scope: set[str] | None  # names of the nodes to sync (gone ones included); None: all
    mode: str  # "list" (no watch on this backend), "relist", "watch" or "catch-up" (another process synced since)
    events: int = 0
    mirror: ClusterMirror | None = None  # the versions to record once the rows are synced
    stored: InventoryWatch | None = None  # the row that records them, when there is one

    @property
    def nothing_to_do(self) -> bool:
        """A watch that saw no change of any node or pod, at the versions the rows are in sync with."""
        return (
            self.scope is not None and not self.scope and self.mirror is not None and self.stored is not None
            and self.mirror.versions == (self.stored.nodes_version, self.stored.pods_version)
        )


def read_cluster(backend: ClusterBackend, *, relist: bool = False) -> ClusterReading:
    """Read the cluster for one sync (outside any transaction; the one query reads the stored versions,
    before the cluster is read, as the generation's meaning requires)."""
    if not isinstance(backend, WatchableCluster):
        return _reading(backend.list_nodes(), backend.list_gpu_pods(), None, "list")
    key = backend.cluster_key
    stored = InventoryWatch.objects.filter(cluster_key=key).first()
    mirror = _mirrors.get(key)
    if mirror is None or stored is None or relist:
        return _relist(backend, None, stored)
    in_step = mirror.versions == (stored.nodes_version, stored.pods_version)
    if not in_step and stored.generation <= mirror.generation:
        return _relist(backend, None, stored)  # rolled back or restored: what the rows lack is unknown
    try:
        return _watch(backend, mirror, stored, catching_up=not in_step)
    except ResourceVersionGone:
        # Too far behind: list again, and sync what differs from the mirror (the rows are as the
        # mirror says, or newer: what changed since them differs from the mirror too).
        return _relist(backend, mirror, stored)


def _watch(backend: WatchableCluster, mirror: ClusterMirror, stored: InventoryWatch, *, catching_up: bool) -> ClusterReading:
    node_changes = backend.watch_nodes(mirror.nodes_version, WATCH_TIMEOUT_S)
    pod_changes = backend.watch_gpu_pods(mirror.pods_version, WATCH_TIMEOUT_S)
    # Applied to a copy: the mirror moves only once the rows are synced (`remember`).
    nodes, pods = dict(mirror.nodes), dict(mirror.pods)
    scope: set[str] = set()
    for node_event in node_changes.events:
        old_node = nodes.get(node_event.key)
        if node_event.item is None:
            nodes.pop(node_event.key, None)
        elif old_node is not None and _same_version(old_node, node_event.item):
            continue  # seen already (a watch may repeat what the list had): not compared again
        else:
            nodes[node_event.key] = node_event.item
        scope.add(node_event.key)
    for pod_event in pod_changes.events:
        old_pod = pods.get(pod_event.key)
        if pod_event.item is None:
            pods.pop(pod_event.key, None)
        elif old_pod is not None and _same_version(old_pod, pod_event.item):
            continue
        else:
            pods[pod_event.key] = pod_event.item
            scope.add(pod_event.item.node_name)
        if old_pod is not None:
            scope.add(old_pod.node_name)
    scope.discard("")  # unbound pods hold nothing
    if not node_changes.events and not pod_changes.events:
        # Only bookmarks: keep watching from the stored versions rather than write newer ones (a
        # quiet cluster is written to only when those fall out of the API's window: 410, relist).
        # Catching up, nothing changed since the mirror, so nor since the (later) stored versions:
        # the mirror is as of those, and takes them.
        new = ClusterMirror(mirror.key, nodes, pods, stored.nodes_version, stored.pods_version) if catching_up else mirror
    else:
        new = ClusterMirror(mirror.key, nodes, pods, node_changes.resource_version, pod_changes.resource_version)
    reading = _scoped(new, scope, "catch-up" if catching_up else "watch")
    reading.events = len(node_changes.events) + len(pod_changes.events)
    reading.stored = stored
    return reading


def _relist(backend: WatchableCluster, mirror: ClusterMirror | None, stored: InventoryWatch | None) -> ClusterReading:
    node_list = backend.list_nodes_versioned()
    pod_list = backend.list_gpu_pods_versioned()
    new = ClusterMirror(
        backend.cluster_key,
        {node.name: node for node in node_list.items},
        {pod.key: pod for pod in pod_list.items},
        node_list.resource_version,
        pod_list.resource_version,
    )
    if mirror is None:
        reading = _reading(node_list.items, pod_list.items, None, "relist")
        reading.mirror, reading.stored = new, stored
        return reading
    # The rows are as the old mirror says: sync the nodes whose objects (or pods) differ from it.
    scope = _differing(mirror.nodes, new.nodes, lambda node: node.name)
    scope |= _differing(mirror.pods, new.pods, lambda pod: pod.node_name)
    scope.discard("")
    reading = _scoped(new, scope, "relist")
    reading.stored = stored
    return reading


def remember(reading: ClusterReading) -> None:
    """The rows are now in sync with what `reading` read: keep its mirror for the next watch.
    (Call inside the sync's transaction: it also records the versions, when they moved.)

    The record moves compare-and-set, from the generation the reading saw; if another sync moved
    (or deleted) it meanwhile, the two overlapped and the rows are as neither's versions say: the
    record is dropped, with this process's mirror, so the next sync of each process relists."""
    mirror = reading.mirror
    if mirror is None:
        return
    stored = reading.stored
    if stored is not None and (stored.nodes_version, stored.pods_version) == mirror.versions:
        mirror.generation = stored.generation
        _mirrors[mirror.key] = mirror
        return
    moved = {"nodes_version": mirror.nodes_version, "pods_version": mirror.pods_version, "synced_at": timezone.now()}
    if stored is None:
        _, won = InventoryWatch.objects.get_or_create(cluster_key=mirror.key, defaults={**moved, "generation": 1})
        generation = 1
    else:
        generation = stored.generation + 1
        won = bool(InventoryWatch.objects.filter(pk=stored.pk, generation=stored.generation).update(
            **moved, generation=generation))
    if not won:
        InventoryWatch.objects.filter(cluster_key=mirror.key).delete()
        _mirrors.pop(mirror.key, None)
        return
    mirror.generation = generation
    _mirrors[mirror.key] = mirror


def widen(reading: ClusterReading, names: set[str]) -> None:
    """Sync these nodes too (as the mirror has them, with their pods), though the cluster did not
    change them: their node agent's report did (`nodes.inventory.agent_overlay`). A reading that
    syncs every node already (scope None) is left as it is."""
    if reading.scope is None or reading.mirror is None:
        return
    added = names - reading.scope
    if not added:
        return
    reading.scope |= added
    mirror = reading.mirror
    reading.observed += [mirror.nodes[name] for name in sorted(added) if name in mirror.nodes and mirror.nodes[name].gpus]
    reading.pods += [pod for pod in mirror.pods.values() if pod.node_name in added]


def forget_mirrors() -> None:
    """Drop every process mirror: the next sync of each cluster relists (tests, resets)."""
    _mirrors.clear()


def _scoped(mirror: ClusterMirror, scope: set[str], mode: str) -> ClusterReading:
    observed = [mirror.nodes[name] for name in sorted(scope) if name in mirror.nodes and mirror.nodes[name].gpus]
    pods = [pod for pod in mirror.pods.values() if pod.node_name in scope]
    reading = _reading(observed, pods, scope, mode)
    reading.mirror = mirror
    return reading


def _reading(nodes: list[ClusterNode], pods: list[ClusterPod], scope: set[str] | None, mode: str) -> ClusterReading:
    # Nodes without GPUs (CPU workers, control plane) are not inventory gpuplane places onto.
    return ClusterReading(observed=[node for node in nodes if node.gpus], pods=pods, scope=scope, mode=mode)


def _differing(
    old: Mapping[str, ClusterItem], new: Mapping[str, ClusterItem], node_of: Callable[[ClusterItem], str]
) -> set[str]:
    """The nodes of the objects added, removed or at another resourceVersion between two lists."""
    changed: set[str] = set()
    for key in old.keys() | new.keys():
        before, after = old.get(key), new.get(key)
        if before is None or after is None or not _same_version(before, after):
            changed.update(node_of(item) for item in (before, after) if item is not None)
    return changed


def _same_version(old: ClusterNode | ClusterPod, new: ClusterNode | ClusterPod) -> bool:
    # An object without a resourceVersion (a backend that keeps none) may have changed.
    return bool(new.resource_version) and old.resource_version == new.resource_version
