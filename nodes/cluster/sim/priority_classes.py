"""PriorityClasses in the simulator (cluster-scoped, by name): created, or replaced when their
immutable value or preemption policy differ, as ``KubernetesCluster.ensure_priority_class`` does."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from nodes.cluster.manifests import priority_class_manifest
from nodes.cluster.sim.store import State

T = TypeVar("T")


def ensure(state: State, name: str, value: int, description: str, *, preempts: bool) -> bool:
    wanted = priority_class_manifest(name, value, description, preempts=preempts)
    classes = state["priorityclasses"]
    stored = classes.peek(name) if name in classes else None
    if stored is not None and (stored.get("value"), stored.get("preemptionPolicy")) == (
            wanted["value"], wanted["preemptionPolicy"]):
        return False
    classes[name] = wanted
    return True


def stored_priority_classes(state: State) -> dict[str, Any]:
    classes = state["priorityclasses"]
    return {name: classes.peek(name) for name in list(classes)}


class PriorityClassAPI:
    """SimulatedCluster's ``ensure_priority_class`` and a reader for tests and the demo."""

    if TYPE_CHECKING:
        def _operate(self, operation: str, action: Callable[[State, float], T]) -> T: ...

    def ensure_priority_class(self, name: str, value: int, description: str, *, preempts: bool = True) -> bool:
        return self._operate("ensure_priority_class",
                             lambda state, now: ensure(state, name, value, description, preempts=preempts))

    def priority_classes(self) -> dict[str, Any]:
        """The stored PriorityClasses by name."""
        return self._operate("priority_classes", lambda state, now: stored_priority_classes(state))
