"""`ensure_priority_class` of the ClusterBackend protocol, for KubernetesCluster."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.cluster.api_errors import Conflict
from nodes.cluster.kubernetes_http import FIELD_MANAGER, json_content
from nodes.cluster.manifests import priority_class_manifest


class PriorityClassCalls:
    """PriorityClasses (scheduling.k8s.io/v1, cluster-scoped) through ``self.scheduling``."""

    scheduling: Any
    request_timeout_s: tuple[float, float]

    if TYPE_CHECKING:
        def _json(self, action: str, call: Callable[[], Any]) -> dict[str, Any]: ...

        def _call(self, action: str, call: Callable[[], Any], *,
                  too_many_requests_is_eviction_block: bool = False) -> None: ...

    def ensure_priority_class(self, name: str, value: int, description: str, *, preempts: bool = True) -> bool:
        """POST it; on 409 (it exists) GET it, and when its value or preemption policy differ
        (immutable fields) DELETE it and POST it again."""
        body = priority_class_manifest(name, value, description, preempts=preempts)
        options: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.request_timeout_s}
        try:
            self._call(f"create priorityclass {name}", lambda: self.scheduling.create_priority_class(
                body, field_manager=FIELD_MANAGER, _headers=json_content(), **options))
            return True
        except Conflict:
            pass
        stored = self._json(f"read priorityclass {name}", lambda: self.scheduling.read_priority_class(name, **options))
        if (stored.get("value"), stored.get("preemptionPolicy", "PreemptLowerPriority")) == (
                body["value"], body["preemptionPolicy"]):
            return False
        self._call(f"delete priorityclass {name}", lambda: self.scheduling.delete_priority_class(name, **options))
        self._call(f"create priorityclass {name}", lambda: self.scheduling.create_priority_class(
            body, field_manager=FIELD_MANAGER, _headers=json_content(), **options))
        return True
