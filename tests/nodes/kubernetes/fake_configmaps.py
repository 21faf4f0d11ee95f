"""The ConfigMaps of FakeCluster (tests/nodes/kubernetes/fake_cluster.py), as a mixin: stored as the API
server's JSON, read, created (POST) and replaced (PUT, 409 from a stale resourceVersion),
`?dryRun=All` checked and not stored, writes refused with RBAC's 403 while
`configmap_writes_forbidden`. The device plugin's named configs are read from here."""
from __future__ import annotations

import copy
import threading
from itertools import count
from typing import Any

import yaml

from nodes.sharing.device_plugin import DEVICE_PLUGIN_CONFIGMAP
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import RecordedRequest, Reply

PLUGIN_NAMESPACE = "gpu-operator"

__all__ = ["FakeConfigMaps"]


class FakeConfigMaps:
    _lock: threading.Lock
    configmaps: dict[str, dict[str, Any]]
    _versions: count
    configmap_writes_forbidden: bool

    def remove_plugin_config(self, name: str) -> None:
        """Take a named config out of the device plugin's ConfigMap (as if the operator never added it)."""
        with self._lock:
            stored = self.configmaps[f"{PLUGIN_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP}"]
            self._store_configmap({**stored, "data": {k: v for k, v in stored["data"].items() if k != name}})

    def plugin_config_names(self) -> list[str]:
        """The named configs in the device plugin's ConfigMap now."""
        with self._lock:
            return sorted(self._plugin_configs())

    def _plugin_configs(self) -> dict[str, Any]:
        configmap = self.configmaps.get(f"{PLUGIN_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP}") or {}
        return {name: yaml.safe_load(text) for name, text in (configmap.get("data") or {}).items()}

    def _store_configmap(self, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        stored = {"apiVersion": "v1", "kind": "ConfigMap", "data": dict(manifest.get("data") or {}),
                  "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {}),
                               "resourceVersion": str(next(self._versions))}}
        self.configmaps[f"{meta['namespace']}/{meta['name']}"] = stored
        return copy.deepcopy(stored)

    def _read_configmap(self, request: RecordedRequest, ns: str, name: str) -> Reply:
        stored = self.configmaps.get(f"{ns}/{name}")
        return Reply(200, copy.deepcopy(stored)) if stored else Reply(404, k8s.not_found("configmaps", name))

    def _refuse_write(self, name: str) -> Reply | None:
        if self.configmap_writes_forbidden:
            return Reply(403, k8s.status_error(403, "Forbidden", f'configmaps "{name}" is forbidden: User '
                                               '"system:serviceaccount:gpuplane:gpuplane" cannot update resource '
                                               '"configmaps" in API group "" in the namespace "gpu-operator"'))
        return None

    def _create_configmap(self, request: RecordedRequest, ns: str) -> Reply:
        name = request.body["metadata"]["name"]
        refused = self._refuse_write(name)
        if refused:
            return refused
        if f"{ns}/{name}" in self.configmaps:
            return Reply(409, k8s.already_exists("configmaps", name))
        if request.param("dryRun") == "All":
            return Reply(201, copy.deepcopy(request.body))
        return Reply(201, self._store_configmap(request.body))

    def _replace_configmap(self, request: RecordedRequest, ns: str, name: str) -> Reply:
        refused = self._refuse_write(name)
        if refused:
            return refused
        stored = self.configmaps.get(f"{ns}/{name}")
        if stored is None:
            return Reply(404, k8s.not_found("configmaps", name))
        if request.body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            return Reply(409, k8s.status_error(409, "Conflict", f'Operation cannot be fulfilled on configmaps "{name}": '
                                               "the object has been modified; please apply your changes to the "
                                               "latest version and try again"))
        if request.param("dryRun") == "All":
            return Reply(200, copy.deepcopy(request.body))
        return Reply(200, self._store_configmap(request.body))

