"""ConfigMaps in the simulator: the API's read and write (with resourceVersion and dry runs), and
the seeding controls that fill the GPU operator's two ConfigMaps directly.

The device plugin (`device_plugin`) and the MIG manager (`mig_manager`) read their configs from
those ConfigMaps whoever wrote them, so a config gpuplane writes through `write_configmap` is what
they run, as on a real cluster. Writes are checked as the API server checks them: the data keys
must be valid ConfigMap keys, a create of an existing ConfigMap or a replace from a stale
resourceVersion is a 409 (`Conflict`), a replace of a missing one a 404.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from nodes.cluster.base import ClusterConfigMap, Conflict, NotFound
from nodes.cluster.manifests import configmap_manifest
from nodes.cluster.parsing import parse_configmap
from nodes.cluster.sim import device_plugin, mig_manager
from nodes.cluster.sim.store import State
from nodes.sharing.configmap import check_configmap_key
from nodes.sharing.schema import InvalidSharingConfig

T = TypeVar("T")


def read(state: State, namespace: str, name: str) -> ClusterConfigMap | None:
    """The stored ConfigMap, None when there is none."""
    configmaps = state["configmaps"]
    key = f"{namespace}/{name}"
    return parse_configmap(configmaps.peek(key)) if key in configmaps else None


def write(state: State, configmap: ClusterConfigMap, *, dry_run: bool) -> None:
    """Create or replace ``configmap`` as the API server would (see the module docstring)."""
    key = configmap.key
    stored = state["configmaps"].peek(key) if key in state["configmaps"] else None
    if not configmap.resource_version and stored is not None:
        raise Conflict(f"write configmap {key}: HTTP 409 AlreadyExists: configmaps \"{configmap.name}\" already exists")
    if configmap.resource_version:
        if stored is None:
            raise NotFound(f"write configmap {key}: HTTP 404 NotFound: configmaps \"{configmap.name}\" not found")
        current = str(stored["metadata"].get("resourceVersion", ""))
        if current != configmap.resource_version:
            raise Conflict(f"write configmap {key}: HTTP 409 Conflict: Operation cannot be fulfilled on configmaps "
                           f"\"{configmap.name}\": the object has been modified; please apply your changes to the "
                           "latest version and try again")
    for data_key in configmap.data:
        try:
            check_configmap_key(data_key)
        except InvalidSharingConfig as exc:
            raise Conflict(f"write configmap {key}: HTTP 422 Invalid: {exc}") from None
    if not dry_run:
        manifest = configmap_manifest(configmap)
        manifest["metadata"].pop("resourceVersion", None)  # the store gives the next one
        state["configmaps"][key] = manifest


class ConfigMapAPI:
    """SimulatedCluster's ConfigMap methods: `read_configmap` / `write_configmap` of the
    ClusterBackend protocol, and the seeding controls for the GPU operator's configs."""

    if TYPE_CHECKING:
        def _operate(self, operation: str, action: Callable[[State, float], T]) -> T: ...

        def _transaction(self) -> AbstractContextManager[State]: ...

    def read_configmap(self, namespace: str, name: str) -> ClusterConfigMap | None:
        return self._operate("read_configmap", lambda state, now: read(state, namespace, name))

    def write_configmap(self, configmap: ClusterConfigMap, *, dry_run: bool = False) -> None:
        self._operate("write_configmap", lambda state, now: write(state, configmap, dry_run=dry_run))

    def set_device_plugin_config(self, name: str, config: dict[str, Any]) -> None:
        """Add or replace the named entry of the device plugin ConfigMap (seeding, as an operator would).

        `config` is the parsed YAML (`nodes.sharing.device_plugin.device_plugin_config`); an invalid one raises
        ClusterError, as the plugin would crash-loop on it. Nodes pick it up only on restart.
        """
        device_plugin.check_device_plugin_config(name, config)
        with self._transaction() as state:
            device_plugin.put_device_plugin_config(state, name, config)

    def set_mig_config(self, name: str, config: list[dict[str, Any]]) -> None:
        """Add or replace the named mig-parted config the MIG manager can apply (seeding).

        Only the shape is checked here (ClusterError when malformed); a layout that does not fit
        a node's GPUs makes that node's `nvidia.com/mig.config.state` `failed` when applied.
        """
        with self._transaction() as state:
            mig_manager.put_mig_config(state, name, config)



