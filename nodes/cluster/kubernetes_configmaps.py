"""KubernetesCluster's ConfigMap calls (read, create or replace, with a dry run), as a mixin.

Kept apart from `nodes.cluster.kubernetes` by concern; like `api_errors` it does not import the
kubernetes client (only that module may): it calls the `CoreV1Api` object the cluster holds and
goes through the cluster's `_json` / `_call`, which turn every failure into a ClusterError.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.cluster.base import ClusterConfigMap, NotFound
from nodes.cluster.kubernetes_http import FIELD_MANAGER, json_content
from nodes.cluster.manifests import configmap_manifest
from nodes.cluster.parsing import parse_configmap


class ConfigMapCalls:
    """`read_configmap` and `write_configmap` of the ClusterBackend protocol, for KubernetesCluster."""

    core: Any
    request_timeout_s: tuple[float, float]

    if TYPE_CHECKING:
        def _json(self, action: str, call: Callable[[], Any]) -> dict[str, Any]: ...

        def _call(self, action: str, call: Callable[[], Any], *,
                  too_many_requests_is_eviction_block: bool = False) -> None: ...

    def read_configmap(self, namespace: str, name: str) -> ClusterConfigMap | None:
        """GET the ConfigMap; None when the API answers 404 (no such ConfigMap, or no such namespace)."""
        try:
            obj = self._json(f"read configmap {namespace}/{name}", lambda: self.core.read_namespaced_config_map(
                name, namespace, _preload_content=False, _request_timeout=self.request_timeout_s))
        except NotFound:
            return None
        return parse_configmap(obj)

    def write_configmap(self, configmap: ClusterConfigMap, *, dry_run: bool = False) -> None:
        """POST it (no resourceVersion) or PUT it over the version it was read at: the API server
        answers 409 (Conflict) when that version is stale or the ConfigMap exists already."""
        body = configmap_manifest(configmap)
        options: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_headers": json_content(),
                                   "_preload_content": False, "_request_timeout": self.request_timeout_s}
        if dry_run:
            options["dry_run"] = "All"
        verb = "check writing" if dry_run else "write"
        action = f"{verb} configmap {configmap.key}"
        if configmap.resource_version:
            self._call(action, lambda: self.core.replace_namespaced_config_map(
                configmap.name, configmap.namespace, body, **options))
        else:
            self._call(action, lambda: self.core.create_namespaced_config_map(configmap.namespace, body, **options))
