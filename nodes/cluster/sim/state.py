"""The simulated cluster as its modules see it: collections of objects that remember what a call touched.

`store` keeps one row per object; these collections tell it which objects a call set, deleted or
handed out for mutation, so that it serialises and writes only those.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nodes.cluster.sim.indexes import Indexes

STATE_VERSION = 1
# Collections of Kubernetes objects, whose metadata.resourceVersion is the row's version.
KUBERNETES_COLLECTIONS = ("nodes", "pods", "deployments", "pdbs", "configmaps", "priorityclasses")
# Top-level collections, and the simulator's bookkeeping under "sim" (stored as "sim.<name>").
TOP_COLLECTIONS = (*KUBERNETES_COLLECTIONS, "faults")
SIM_COLLECTIONS = ("nodes", "pods", "replica_sets")
# The collection of top-level values that are not collections ("counter", "events").
META = ""


class Collection(dict[str, Any]):
    """Objects by key that remember which keys were set, deleted or handed out for mutation.

    `touched` is what the transaction must compare and maybe write; `unsynced` what the indexes
    must look at again. Iteration and `peek` do not mark: they are for reading.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.touched: set[str] = set()
        self.unsynced: set[str] = set()

    def _mark(self, key: str) -> None:
        self.touched.add(key)
        self.unsynced.add(key)

    def __getitem__(self, key: str) -> Any:
        self._mark(key)
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        self._mark(key)
        return dict.get(self, key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        self._mark(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        self._mark(key)
        dict.__delitem__(self, key)

    def pop(self, key: str, *default: Any) -> Any:
        self._mark(key)
        return dict.pop(self, key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._mark(key)
        return dict.setdefault(self, key, default)

    def clear(self) -> None:
        for key in self:
            self._mark(key)
        dict.clear(self)

    def peek(self, key: str) -> Any:
        """The object `key`, for reading only (KeyError when absent)."""
        return dict.__getitem__(self, key)


class State(dict[str, Any]):
    """The whole cluster as the simulation modules see it; see `empty_state` for its layout.

    Top-level values other than the collections ("counter", "events", ...) are stored one row
    each and marked when read or set, as a collection's objects are.
    """

    def __init__(self) -> None:
        super().__init__()
        self.touched: set[str] = set()
        self.indexes = Indexes()
        # The store's version this transaction started from: what a list is "as of".
        self.version_seen = 0
        dict.__setitem__(self, "version", STATE_VERSION)
        for name in TOP_COLLECTIONS:
            dict.__setitem__(self, name, Collection(name))
        dict.__setitem__(self, "sim", {name: Collection(f"sim.{name}") for name in SIM_COLLECTIONS})
        dict.__setitem__(self, "counter", 0)
        dict.__setitem__(self, "events", [])

    def __getitem__(self, key: str) -> Any:
        if key not in _STRUCTURE:
            self.touched.add(key)
        return dict.__getitem__(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key in _STRUCTURE:
            raise TypeError(f"state[{key!r}] is a collection; change its objects instead")
        self.touched.add(key)
        dict.__setitem__(self, key, value)

    def collections(self) -> Iterator[Collection]:
        for name in TOP_COLLECTIONS:
            yield dict.__getitem__(self, name)
        yield from dict.__getitem__(self, "sim").values()

    def collection(self, name: str) -> Collection:
        if name.startswith("sim."):
            result: Collection = dict.__getitem__(self, "sim")[name[4:]]
        else:
            result = dict.__getitem__(self, name)
        return result

    def meta_keys(self) -> list[str]:
        return [key for key in self if key not in _STRUCTURE]

    def clear_all(self) -> None:
        """Empty the cluster (every object deleted, the counter and events back to their start)."""
        for collection in self.collections():
            collection.clear()
        for key in self.meta_keys():
            self.touched.add(key)
            dict.__delitem__(self, key)
        self["counter"] = 0
        self["events"] = []


_STRUCTURE = frozenset({"version", "sim", *TOP_COLLECTIONS})


def structure_key(key: str) -> bool:
    """True for the top-level keys that are collections (or the format version), not stored values."""
    return key in _STRUCTURE


def empty_state() -> State:
    """A cluster with nothing in it.

    Kubernetes objects are kept as the API server would return them: "nodes" by name, "pods",
    "deployments", "pdbs" and "configmaps" by "namespace/name". "faults" holds the queued
    injected faults per operation, "events" the latest simulator events, "counter" a sequence
    for pod creation order and generated names. "sim" holds the simulator's bookkeeping a real
    API server would not show: the running plugin config and MIG manager progress per node
    ("nodes"), pod bind times and owners ("pods"), other teams' ReplicaSets ("replica_sets").
    """
    return State()
