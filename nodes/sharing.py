"""NVIDIA's sharing config formats: k8s-device-plugin configs, their ConfigMap, mig-parted configs.

Pure Python (no Django). gpuplane generates configuration for NVIDIA's real components, so the
shapes here are exactly theirs (DESIGN.md section 4) and the validators enforce the limits the
components enforce, plus the few gpuplane relies on for its accounting:

- device plugin config ``version: v1``; ``flags.migStrategy`` none | single | mixed;
  ``sharing.timeSlicing`` or ``sharing.mps`` (never both) replicating ``nvidia.com/gpu`` with an
  integer ``replicas >= 2``, the same for every GPU of the node;
- MPS only on full GPUs (``migStrategy: none``) and at most 48 clients per GPU from compute
  capability 7.5, 16 before;
- ``renameByDefault: false`` (gpuplane counts ``nvidia.com/gpu``, the product label gets
  ``-SHARED``) and, for time-slicing, ``failRequestsGreaterThanOne: true`` (two replicas of one
  request could land on the same physical GPU);
- mig-parted ``version: v1`` / ``mig-configs``, whose ``mig-devices`` are checked with
  ``nodes.mig``.
Unknown keys are rejected rather than ignored: a typo would otherwise silently give a node the
default config.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from nodes.catalog import CATALOG, GPUModel, find_model
from nodes.contract import LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE, RESOURCE_GPU
from nodes.mig import InvalidMIGLayout, plan_layout

SharingStrategy = Literal["none", "mps", "time-slicing"]
MIGStrategy = Literal["none", "single", "mixed"]

SHARING_STRATEGIES: tuple[str, ...] = ("none", "mps", "time-slicing")
MIG_STRATEGIES: tuple[str, ...] = ("none", "single", "mixed")
CONFIG_VERSION = "v1"
SHARED_RESOURCE = RESOURCE_GPU

# Where the GPU operator finds the named device plugin configs (ClusterPolicy
# devicePlugin.config.name) and the mig-parted configs (migManager.config.name).
GPU_OPERATOR_NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_CONFIGMAP = "gpuplane-device-plugin-configs"
MIG_PARTED_CONFIGMAP = "gpuplane-mig-parted-config"
MIG_PARTED_CONFIGMAP_KEY = "config.yaml"

# MPS client limits per GPU (CUDA MPS documentation): 48 from Volta's successor Turing (7.5) on.
MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_BEFORE_7_5 = 16
_MPS_48_CLIENTS_FROM_CC = (7, 5)

# The device plugin's known flags (api/config/v1 Flags); only migStrategy matters to gpuplane,
# the others are accepted so a hand-written config with them is not refused.
_KNOWN_FLAGS = frozenset(
    {
        "migStrategy",
        "failOnInitError",
        "mpsRoot",
        "nvidiaDriverRoot",
        "nvidiaDevRoot",
        "gdsEnabled",
        "mofedEnabled",
        "useNodeFeatureAPI",
        "deviceDiscoveryStrategy",
        "plugin",
        "gfd",
    }
)
_SHARING_KEYS = {"timeSlicing": "time-slicing", "mps": "mps"}
_TIME_SLICING_KEYS = frozenset({"renameByDefault", "failRequestsGreaterThanOne", "resources"})
_MPS_KEYS = frozenset({"renameByDefault", "resources"})
_RESOURCE_KEYS = frozenset({"name", "replicas"})
_MIG_ENTRY_KEYS = frozenset({"devices", "device-filter", "mig-enabled", "mig-devices"})
_PROFILE_NAME = re.compile(r"^\d+g\.\d+gb$")


class InvalidSharingConfig(ValueError):
    """A device plugin or mig-parted config that NVIDIA's components (or gpuplane) would refuse."""


@dataclass(frozen=True)
class SharingSpec:
    """What a device plugin config does to a node: how ``nvidia.com/gpu`` is shared, and the MIG strategy.

    ``replicas`` is 1 exactly when ``strategy`` is ``"none"``.
    """

    strategy: SharingStrategy
    replicas: int
    mig_strategy: MIGStrategy


# --- YAML --------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block-style YAML as NVIDIA's documentation and kubectl write it; multi-line text as ``|`` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Embedded YAML documents (ConfigMap data) stay readable as literal blocks instead of
    # one quoted line full of \n escapes.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(obj: Any) -> str:
    """Render ``obj`` as block-style YAML, keys in insertion order; ``yaml.safe_load`` reads it back equal."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


# --- device plugin -----------------------------------------------------------------------------


def device_plugin_config(
    strategy: SharingStrategy, replicas: int = 1, mig_strategy: MIGStrategy = "none"
) -> dict[str, Any]:
    """The k8s-device-plugin v1 config for one node sharing mode.

    ``strategy="none"`` (``replicas`` must be 1) gives just the flags; ``"time-slicing"`` and
    ``"mps"`` replicate ``nvidia.com/gpu`` ``replicas`` times. The result passes
    ``validate_device_plugin_config``; bad arguments raise ``InvalidSharingConfig`` saying why.
    """
    if strategy not in SHARING_STRATEGIES:
        raise InvalidSharingConfig(f"unknown sharing strategy {strategy!r} (valid: {', '.join(SHARING_STRATEGIES)})")
    config: dict[str, Any] = {"version": CONFIG_VERSION, "flags": {"migStrategy": mig_strategy}}
    if strategy == "none":
        if replicas != 1:
            raise InvalidSharingConfig(f"strategy none does not replicate GPUs: replicas must be 1, not {replicas!r}")
    else:
        resources = [{"name": SHARED_RESOURCE, "replicas": replicas}]
        if strategy == "time-slicing":
            config["sharing"] = {
                "timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": True, "resources": resources}
            }
        else:
            config["sharing"] = {"mps": {"renameByDefault": False, "resources": resources}}
    validate_device_plugin_config(config)
    return config


def validate_device_plugin_config(config: Mapping[str, Any]) -> SharingSpec:
    """Check a parsed device plugin config and say what it does.

    Raises ``InvalidSharingConfig`` for: a version other than v1; unknown top-level, flag,
    sharing or resource keys; a migStrategy other than none/single/mixed; both timeSlicing and mps;
    MPS with a MIG strategy other than none (MPS shares only full GPUs); a resource other than
    nvidia.com/gpu, listed twice or missing; replicas that are not an integer >= 2;
    ``renameByDefault: true``; time-slicing without ``failRequestsGreaterThanOne: true``. The MPS
    client limit depends on the GPU model and is checked separately by ``check_mps_client_limit``.
    """
    if not isinstance(config, Mapping):
        raise InvalidSharingConfig(f"a device plugin config is a mapping, not {type(config).__name__}")
    _reject_unknown("device plugin config", config, {"version", "flags", "sharing"})
    if config.get("version") != CONFIG_VERSION:
        raise InvalidSharingConfig(f"device plugin config version must be {CONFIG_VERSION!r}, not {config.get('version')!r}")

    flags = config.get("flags") or {}
    if not isinstance(flags, Mapping):
        raise InvalidSharingConfig("flags must be a mapping")
    _reject_unknown("flags", flags, _KNOWN_FLAGS)
    # The device plugin's own default is none.
    mig_strategy = flags.get("migStrategy", "none")
    if mig_strategy not in MIG_STRATEGIES:
        raise InvalidSharingConfig(f"unknown flags.migStrategy {mig_strategy!r} (valid: {', '.join(MIG_STRATEGIES)})")

    sharing = config.get("sharing") or {}
    if not isinstance(sharing, Mapping):
        raise InvalidSharingConfig("sharing must be a mapping")
    _reject_unknown("sharing", sharing, set(_SHARING_KEYS))
    present = [key for key in _SHARING_KEYS if sharing.get(key) is not None]
    if not present:
        return SharingSpec(strategy="none", replicas=1, mig_strategy=mig_strategy)
    if len(present) > 1:
        raise InvalidSharingConfig("sharing.timeSlicing and sharing.mps are mutually exclusive on a node; set only one")
    key = present[0]
    strategy = _SHARING_KEYS[key]
    if strategy == "mps" and mig_strategy != "none":
        raise InvalidSharingConfig(
            f"MPS shares only full GPUs: it is not supported with migStrategy {mig_strategy} (use migStrategy none)"
        )

    body = sharing[key]
    if not isinstance(body, Mapping):
        raise InvalidSharingConfig(f"sharing.{key} must be a mapping")
    _reject_unknown(f"sharing.{key}", body, _TIME_SLICING_KEYS if strategy == "time-slicing" else _MPS_KEYS)
    if body.get("renameByDefault", False) is not False:
        raise InvalidSharingConfig(
            f"sharing.{key}.renameByDefault must be false: gpuplane counts shared replicas as nvidia.com/gpu, "
            "and a renamed resource (nvidia.com/gpu.shared) would not be counted"
        )
    if strategy == "time-slicing" and body.get("failRequestsGreaterThanOne") is not True:
        raise InvalidSharingConfig(
            "sharing.timeSlicing.failRequestsGreaterThanOne must be true: two replicas given to one pod "
            "can land on the same physical GPU"
        )

    resources = body.get("resources")
    if not isinstance(resources, list) or not resources:
        raise InvalidSharingConfig(f"sharing.{key}.resources must list {SHARED_RESOURCE} with its replicas")
    seen: set[str] = set()
    replicas = 0
    for resource in resources:
        if not isinstance(resource, Mapping):
            raise InvalidSharingConfig(f"each entry of sharing.{key}.resources is a mapping, not {resource!r}")
        _reject_unknown(f"sharing.{key}.resources entry", resource, _RESOURCE_KEYS)
        name = resource.get("name")
        if name != SHARED_RESOURCE:
            raise InvalidSharingConfig(
                f"unknown resource {name!r} in sharing.{key}.resources: gpuplane shares only {SHARED_RESOURCE}"
            )
        if name in seen:
            raise InvalidSharingConfig(
                f"{name} is listed twice in sharing.{key}.resources: replicas are per node, the same for every GPU"
            )
        seen.add(name)
        stated = resource.get("replicas")
        if not isinstance(stated, int) or isinstance(stated, bool) or stated < 2:
            raise InvalidSharingConfig(
                f"replicas of {name} must be an integer >= 2 when sharing is set, not {stated!r}"
            )
        replicas = stated
    return SharingSpec(strategy=strategy, replicas=replicas, mig_strategy=mig_strategy)  # type: ignore[arg-type]


def mps_client_limit(compute_capability: tuple[int, int]) -> int:
    """Most MPS clients one GPU serves: 48 for compute capability >= 7.5, else 16."""
    return MPS_MAX_CLIENTS if tuple(compute_capability) >= _MPS_48_CLIENTS_FROM_CC else MPS_MAX_CLIENTS_BEFORE_7_5


def check_mps_client_limit(replicas: int, compute_capability: tuple[int, int]) -> None:
    """Raise ``InvalidSharingConfig`` when ``replicas`` MPS clients per GPU exceed the GPU's limit."""
    limit = mps_client_limit(compute_capability)
    if replicas > limit:
        major, minor = compute_capability
        raise InvalidSharingConfig(
            f"MPS serves at most {limit} clients per GPU on compute capability {major}.{minor}; "
            f"{replicas} replicas is too many"
        )


def device_plugin_configmap(
    configs: Mapping[str, Mapping[str, Any]],
    *,
    name: str = DEVICE_PLUGIN_CONFIGMAP,
    namespace: str = GPU_OPERATOR_NAMESPACE,
) -> dict[str, Any]:
    """The ConfigMap holding named device plugin configs, each rendered as YAML text.

    A node picks one with the label ``nvidia.com/device-plugin.config=<name>``. Every config is
    validated first (``InvalidSharingConfig`` names the bad one); config names must be valid
    ConfigMap keys.
    """
    data: dict[str, str] = {}
    for key, config in configs.items():
        _check_configmap_key(key)
        try:
            validate_device_plugin_config(config)
        except InvalidSharingConfig as exc:
            raise InvalidSharingConfig(f"device plugin config {key}: {exc}") from None
        data[key] = to_yaml(_plain(config))
    return _configmap(name, namespace, data)


# --- mig-parted ---------------------------------------------------------------------------------


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
        _check_configmap_key(key)
        try:
            validate_mig_entries(entries, model=model, check_layouts=check_layouts)
        except InvalidSharingConfig as exc:
            raise InvalidSharingConfig(f"mig-parted config {key}: {exc}") from None
        mig_configs[key] = [_plain(entry) for entry in entries]
    return {"version": CONFIG_VERSION, "mig-configs": mig_configs}


def validate_mig_parted_config(
    config: Mapping[str, Any], *, model: GPUModel | str | None = None, check_layouts: bool = True
) -> None:
    """Check a parsed mig-parted file (version v1, a ``mig-configs`` mapping of valid entry lists)."""
    if not isinstance(config, Mapping):
        raise InvalidSharingConfig(f"a mig-parted config is a mapping, not {type(config).__name__}")
    _reject_unknown("mig-parted config", config, {"version", "mig-configs"})
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
        _reject_unknown(where, entry, _MIG_ENTRY_KEYS)
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
    return _configmap(name, namespace, {MIG_PARTED_CONFIGMAP_KEY: to_yaml(config)})


# --- internals ---------------------------------------------------------------------------------


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


def _reject_unknown(where: str, mapping: Mapping[str, Any], allowed: set[str] | frozenset[str]) -> None:
    unknown = sorted(str(key) for key in mapping if key not in allowed)
    if unknown:
        raise InvalidSharingConfig(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in {where} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _check_configmap_key(key: str) -> None:
    if not isinstance(key, str) or not _CONFIGMAP_KEY.match(key) or len(key) > 253:
        raise InvalidSharingConfig(f"config name {key!r} is not a valid ConfigMap key (letters, digits, '-', '_', '.')")


def _plain(value: Any) -> Any:
    """Copy into plain dicts and lists so YAML never emits Python-specific tags."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE}},
        "data": data,
    }
