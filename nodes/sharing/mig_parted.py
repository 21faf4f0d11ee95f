"""mig-parted configs: the MIG layouts NVIDIA's MIG manager applies to a node's GPUs, and their ConfigMap.

The file is ``version: v1`` with ``mig-configs``, a mapping of config name to entries; a node picks
one with the label ``nvidia.com/mig.config=<name>``. Each entry's ``mig-devices`` must form a
valid layout, checked with ``nodes.mig``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodes.catalog import CATALOG, GPUModel, find_model
from nodes.mig import InvalidMIGLayout, plan_layout
from nodes.sharing.configmap import (
    GPU_OPERATOR_NAMESPACE,
    check_configmap_key,
    managed_configmap,
    plain_data,
    to_yaml,
)
from nodes.sharing.schema import CONFIG_VERSION, InvalidSharingConfig, reject_unknown_keys

# The ConfigMap the GPU operator's MIG manager reads (ClusterPolicy migManager.config.name).
MIG_PARTED_CONFIGMAP = "gpuplane-mig-parted-config"
MIG_PARTED_CONFIGMAP_KEY = "config.yaml"

_MIG_ENTRY_KEYS = frozenset({"devices", "device-filter", "mig-enabled", "mig-devices"})
_PROFILE_NAME = re.compile(r"^\d+g\.\d+gb$")


def mig_parted_config(
    configs: Mapping[str, list[Mapping[str, Any]]],
    *,
    model: GPUModel | str | None = None,
    check_layouts: bool = True,
) -> dict[str, Any]:
    """The mig-parted config ``{"version": "v1", "mig-configs": {...}}`` for named configs.

    Each config is a list of entries ``{"devices": [0, 1] | "all", "mig-enabled": bool,
    "mig-devices": {"3g.40gb": 1, ...}}``; see ``validate_mig_entries`` for the checks (with
    ``model``, a GPUModel or catalog key, every layout must fit that model). Raises
    ``InvalidSharingConfig`` naming the config and entry at fault.
    """
    mig_configs: dict[str, list[dict[str, Any]]] = {}
    for key, entries in configs.items():
        check_configmap_key(key)
        try:
            validate_mig_entries(entries, model=model, check_layouts=check_layouts)
        except InvalidSharingConfig as exc:
            raise InvalidSharingConfig(f"mig-parted config {key}: {exc}") from None
        mig_configs[key] = [plain_data(entry) for entry in entries]
    return {"version": CONFIG_VERSION, "mig-configs": mig_configs}


def validate_mig_parted_config(
    config: Mapping[str, Any], *, model: GPUModel | str | None = None, check_layouts: bool = True
) -> None:
    """Check a parsed mig-parted file (version v1, a ``mig-configs`` mapping of valid entry lists)."""
    if not isinstance(config, Mapping):
        raise InvalidSharingConfig(f"a mig-parted config is a mapping, not {type(config).__name__}")
    reject_unknown_keys("mig-parted config", config, {"version", "mig-configs"})
    if config.get("version") != CONFIG_VERSION:
        raise InvalidSharingConfig(f"mig-parted config version must be {CONFIG_VERSION!r}, not {config.get('version')!r}")
    configs = config.get("mig-configs")
    if not isinstance(configs, Mapping):
        raise InvalidSharingConfig("mig-configs must be a mapping of config name to entries")
    mig_parted_config(configs, model=model, check_layouts=check_layouts)


def validate_mig_entries(
    entries: list[Mapping[str, Any]], *, model: GPUModel | str | None = None, check_layouts: bool = True
) -> None:
    """Check the entries of one mig-parted config.

    Each entry has ``devices`` ("all" or a list of distinct GPU indexes >= 0; two entries never
    name the same GPU), a boolean ``mig-enabled``, and ``mig-devices`` (profile -> count >= 1),
    which must be empty or absent when MIG is disabled. The ``mig-devices`` of one GPU must form a
    valid layout (``nodes.mig.plan_layout``): on ``model`` when given, else on at least one MIG
    model of the catalog that has all those profiles. ``check_layouts=False`` checks only the
    shape, as mig-parted does when it reads the file (a layout that does not fit the node's GPUs
    fails later, when the MIG manager applies it). Raises ``InvalidSharingConfig``.
    """
    if not isinstance(entries, list) or not entries:
        raise InvalidSharingConfig("a mig-parted config is a non-empty list of entries")
    claimed: set[int] = set()
    all_devices_seen = False
    for position, entry in enumerate(entries):
        where = f"entry {position}"
        if not isinstance(entry, Mapping):
            raise InvalidSharingConfig(f"{where} must be a mapping, not {entry!r}")
        reject_unknown_keys(where, entry, _MIG_ENTRY_KEYS)
        devices = entry.get("devices")
        if devices == "all":
            if claimed or all_devices_seen:
                raise InvalidSharingConfig(f"{where}: devices: all overlaps another entry's devices")
            all_devices_seen = True
        elif isinstance(devices, list) and devices:
            for index in devices:
                if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                    raise InvalidSharingConfig(f"{where}: devices must be GPU indexes >= 0, not {index!r}")
                if index in claimed or all_devices_seen:
                    raise InvalidSharingConfig(f"{where}: GPU {index} is configured by more than one entry")
                claimed.add(index)
        else:
            raise InvalidSharingConfig(f"{where}: devices must be \"all\" or a non-empty list of GPU indexes, not {devices!r}")

        enabled = entry.get("mig-enabled")
        if not isinstance(enabled, bool):
            raise InvalidSharingConfig(f"{where}: mig-enabled must be true or false, not {enabled!r}")
        mig_devices = entry.get("mig-devices") or {}
        if not isinstance(mig_devices, Mapping):
            raise InvalidSharingConfig(f"{where}: mig-devices must map profile names to counts")
        if mig_devices and not enabled:
            raise InvalidSharingConfig(f"{where}: mig-devices are set but mig-enabled is false")
        for profile, count in mig_devices.items():
            if not isinstance(profile, str) or not _PROFILE_NAME.match(profile):
                raise InvalidSharingConfig(f"{where}: {profile!r} is not a MIG profile name like 3g.40gb")
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise InvalidSharingConfig(f"{where}: the count of {profile} must be an integer >= 1, not {count!r}")
        if mig_devices and check_layouts:
            _check_layout(where, dict(mig_devices), model)


def mig_parted_configmap(
    configs: Mapping[str, list[Mapping[str, Any]]],
    *,
    model: GPUModel | str | None = None,
    check_layouts: bool = True,
    name: str = MIG_PARTED_CONFIGMAP,
    namespace: str = GPU_OPERATOR_NAMESPACE,
) -> dict[str, Any]:
    """The ConfigMap the MIG manager reads: key ``config.yaml`` holding ``mig_parted_config(configs)``."""
    config = mig_parted_config(configs, model=model, check_layouts=check_layouts)
    return managed_configmap(name, namespace, {MIG_PARTED_CONFIGMAP_KEY: to_yaml(config)})


def _check_layout(where: str, counts: dict[str, int], model: GPUModel | str | None) -> None:
    if model is not None:
        gpu = find_model(model) if isinstance(model, str) else model
        try:
            plan_layout(gpu, counts)
        except InvalidMIGLayout as exc:
            raise InvalidSharingConfig(f"{where}: {exc}") from None
        return
    # Without a model the profile names say which boards are meant; the layout must fit one of them.
    candidates = [
        gpu for gpu in CATALOG.values() if gpu.mig_capable and set(counts) <= {p.name for p in gpu.mig_profiles}
    ]
    if not candidates:
        raise InvalidSharingConfig(f"{where}: no MIG-capable GPU model has all of the profiles {', '.join(sorted(counts))}")
    first_error: InvalidMIGLayout | None = None
    for gpu in candidates:
        try:
            plan_layout(gpu, counts)
            return
        except InvalidMIGLayout as exc:
            first_error = first_error or exc
    raise InvalidSharingConfig(f"{where}: {first_error}")
