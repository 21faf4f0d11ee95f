"""The GPU operator's two ConfigMaps as gpuplane keeps them: the named configs a set of node
configs needs there, whether they are there or could be written, and writing them.

A node switches sharing config by a label naming a config (``nvidia.com/device-plugin.config``,
``nvidia.com/mig.config``); the device plugin and the MIG manager read that config from their
ConfigMap (ClusterPolicy ``devicePlugin.config.name`` = ``gpuplane-device-plugin-configs``,
``migManager.config.name`` = ``gpuplane-mig-parted-config``, in the operator's namespace). A
label naming a config that is not there crash-loops the plugin, so gpuplane writes every config
a change needs before it touches a node (DESIGN.md section 5, step 2):

- ``needed_configs``: the named device-plugin configs and, for MIG-capable nodes, the mig-parted
  configs (``all-disabled`` included: the MIG manager reads only this ConfigMap) of some node configs;
- ``check_configs`` (a preview): each is present, or would be written (the API server accepts a
  dry run of the write), or cannot be: what is in the way, in words;
- ``write_configs``: merge what is missing into the ConfigMaps (created if absent), each write from
  the resourceVersion read, read again and retried when someone else wrote in between.

A config of the same name with other content (someone's hand-written one) is never overwritten:
nodes may run it, and they would change on their next plugin restart. It is a problem instead.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.conf import settings

from nodes.cluster.base import ClusterBackend, ClusterConfigMap, ClusterError, Conflict
from nodes.contract import LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE
from nodes.sharing.configmap import plain_data, to_yaml
from nodes.sharing.device_plugin import DEVICE_PLUGIN_CONFIGMAP, validate_device_plugin_config
from nodes.sharing.mig_parted import MIG_PARTED_CONFIGMAP, MIG_PARTED_CONFIGMAP_KEY, validate_mig_parted_config
from nodes.sharing.node_config import (
    NodeConfig,
    render_device_plugin_config,
    render_mig_parted_entries,
)
from nodes.sharing.schema import CONFIG_VERSION, InvalidSharingConfig

WRITE_ATTEMPTS = 3


@dataclass(frozen=True)
class NeededConfigs:
    """Named configs: device plugin (name -> config) and mig-parted (name -> entries)."""

    device_plugin: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    mig_parted: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigReport:
    """What ``check_configs`` found: configs there already, configs it would write, and problems
    (each a sentence; none means a write would give the nodes every config they need)."""

    present: tuple[str, ...] = ()
    to_write: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"present": list(self.present), "to_write": list(self.to_write), "problems": list(self.problems)}


def needed_configs(configs: Iterable[tuple[NodeConfig, bool]]) -> NeededConfigs:
    """The named configs that ``(config, mig_capable)`` pairs select: each config's device plugin
    config, and on MIG-capable nodes its mig-parted config (the node label names one there too)."""
    plugin: dict[str, dict[str, Any]] = {}
    mig: dict[str, list[dict[str, Any]]] = {}
    for config, mig_capable in configs:
        name, body = render_device_plugin_config(config)
        plugin[name] = body
        if mig_capable:
            mig_name, entries = render_mig_parted_entries(config)
            mig[mig_name] = entries
    return NeededConfigs(dict(sorted(plugin.items())), dict(sorted(mig.items())))


def namespace() -> str:
    """The GPU operator's namespace, where both ConfigMaps live."""
    return str(settings.GPUPLANE_DEVICE_PLUGIN_NAMESPACE)


def check_configs(cluster: ClusterBackend, needed: NeededConfigs) -> ConfigReport:
    """Whether ``needed`` is in the cluster's ConfigMaps, or could be written now; nothing is written."""
    present: list[str] = []
    to_write: list[str] = []
    problems: list[str] = []
    for merge in _merges(cluster, needed, problems):
        present.extend(merge.present)
        problems.extend(merge.problems)
        if merge.updated is None or merge.problems:
            continue
        try:
            cluster.write_configmap(merge.updated, dry_run=True)
        except ClusterError as error:
            problems.append(f"cannot write {', '.join(merge.added)} into ConfigMap {merge.updated.key}: {error}")
            continue
        to_write.extend(merge.added)
    return ConfigReport(tuple(present), tuple(to_write), tuple(problems))


def write_configs(cluster: ClusterBackend, needed: NeededConfigs) -> list[str]:
    """Write what ``needed`` lacks into the ConfigMaps; the names written (none: all were there).

    ClusterError when a config cannot be written, or a different one holds its name (nothing of
    that ConfigMap is written then). Safe to repeat: a config already there is left as it is.
    """
    written: list[str] = []
    for kind in (_DevicePlugin(needed.device_plugin), _MIGParted(needed.mig_parted)):
        if not kind.wanted:
            continue
        for attempt in range(WRITE_ATTEMPTS):
            merge = kind.merge(cluster.read_configmap(namespace(), kind.name))
            if merge.problems:
                raise ClusterError("; ".join(merge.problems))
            if merge.updated is None:
                break
            try:
                cluster.write_configmap(merge.updated)
            except Conflict:
                if attempt + 1 == WRITE_ATTEMPTS:
                    raise
                continue  # someone else wrote it in between: read it again and merge again
            written.extend(merge.added)
            break
    return written


# ---- merging ------------------------------------------------------------------------------------


@dataclass
class _Merge:
    present: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    updated: ClusterConfigMap | None = None  # None: nothing to write


def _merges(cluster: ClusterBackend, needed: NeededConfigs, problems: list[str]) -> list[_Merge]:
    merges = []
    for kind in (_DevicePlugin(needed.device_plugin), _MIGParted(needed.mig_parted)):
        if not kind.wanted:
            continue
        try:
            stored = cluster.read_configmap(namespace(), kind.name)
        except ClusterError as error:
            problems.append(f"cannot read ConfigMap {namespace()}/{kind.name}: {error}")
            continue
        merges.append(kind.merge(stored))
    return merges


class _Kind:
    name = ""

    def __init__(self, wanted: Mapping[str, Any]) -> None:
        self.wanted = dict(wanted)

    def merge(self, stored: ClusterConfigMap | None) -> _Merge:
        """Compare ``wanted`` with ``stored`` (None: no ConfigMap yet) and build what to write."""
        where = f"ConfigMap {namespace()}/{self.name}"
        merge = _Merge()
        try:
            configs = self.read(stored.data if stored is not None else {})
        except (InvalidSharingConfig, yaml.YAMLError) as error:
            merge.problems.append(f"{where} holds a config gpuplane cannot read ({error}); it is not overwritten")
            return merge
        for name, body in self.wanted.items():
            plain = plain_data(body)
            if name not in configs:
                configs[name] = plain
                merge.added.append(name)
            elif configs[name] == plain:
                merge.present.append(name)
            else:
                merge.problems.append(f"{where} has another config named {name} (not the one gpuplane renders); "
                                      "it is not overwritten: rename or remove it")
        if merge.added and not merge.problems:
            labels = dict(stored.labels) if stored is not None else {LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE}
            version = stored.resource_version if stored is not None else ""
            merge.updated = ClusterConfigMap(namespace(), self.name, self.render(configs, stored), labels, version)
        return merge

    def read(self, data: Mapping[str, str]) -> dict[str, Any]:
        raise NotImplementedError

    def render(self, configs: dict[str, Any], stored: ClusterConfigMap | None) -> dict[str, str]:
        raise NotImplementedError


class _DevicePlugin(_Kind):
    """One entry per named config, each the YAML text of a device plugin config."""

    name = DEVICE_PLUGIN_CONFIGMAP

    def read(self, data: Mapping[str, str]) -> dict[str, Any]:
        return {key: yaml.safe_load(text) for key, text in data.items()}

    def render(self, configs: dict[str, Any], stored: ClusterConfigMap | None) -> dict[str, str]:
        data = dict(stored.data) if stored is not None else {}
        for name in self.wanted:
            validate_device_plugin_config(configs[name])
            data[name] = to_yaml(configs[name])
        return data


class _MIGParted(_Kind):
    """One ``config.yaml`` entry: a mig-parted file whose ``mig-configs`` holds every named config."""

    name = MIG_PARTED_CONFIGMAP

    def read(self, data: Mapping[str, str]) -> dict[str, Any]:
        text = data.get(MIG_PARTED_CONFIGMAP_KEY)
        if not text:
            return {}
        parsed = yaml.safe_load(text)
        validate_mig_parted_config(parsed, check_layouts=False)
        return dict(parsed["mig-configs"])

    def render(self, configs: dict[str, Any], stored: ClusterConfigMap | None) -> dict[str, str]:
        document = {"version": CONFIG_VERSION, "mig-configs": dict(sorted(configs.items()))}
        validate_mig_parted_config(document, check_layouts=False)
        return {**(stored.data if stored is not None else {}), MIG_PARTED_CONFIGMAP_KEY: to_yaml(document)}
