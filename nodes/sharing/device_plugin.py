"""k8s-device-plugin configs: how a node's ``nvidia.com/gpu`` is shared, and the ConfigMap holding them.

The device plugin config is ``version: v1``; ``flags.migStrategy`` none | single | mixed;
``sharing.timeSlicing`` or ``sharing.mps`` (never both) replicating ``nvidia.com/gpu`` with an
integer ``replicas >= 2``, the same for every GPU of the node. gpuplane also requires:

- MPS only on full GPUs (``migStrategy: none``) and at most 48 clients per GPU from compute
  capability 7.5, 16 before;
- ``renameByDefault: false`` (gpuplane counts ``nvidia.com/gpu``, the product label gets
  ``-SHARED``) and, for time-slicing, ``failRequestsGreaterThanOne: true`` (two replicas of one
  request could land on the same physical GPU).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nodes.contract import RESOURCE_GPU
from nodes.sharing.configmap import (
    GPU_OPERATOR_NAMESPACE,
    check_configmap_key,
    managed_configmap,
    plain_data,
    to_yaml,
)
from nodes.sharing.schema import CONFIG_VERSION, InvalidSharingConfig, reject_unknown_keys

SharingStrategy = Literal["none", "mps", "time-slicing"]
MIGStrategy = Literal["none", "single", "mixed"]

SHARING_STRATEGIES: tuple[str, ...] = ("none", "mps", "time-slicing")
MIG_STRATEGIES: tuple[str, ...] = ("none", "single", "mixed")
SHARED_RESOURCE = RESOURCE_GPU

# The ConfigMap of named configs the GPU operator's device plugin reads (ClusterPolicy
# devicePlugin.config.name).
DEVICE_PLUGIN_CONFIGMAP = "gpuplane-device-plugin-configs"

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


@dataclass(frozen=True)
class SharingSpec:
    """What a device plugin config does to a node: how ``nvidia.com/gpu`` is shared, and the MIG strategy.

    ``replicas`` is 1 exactly when ``strategy`` is ``"none"``.
    """

    strategy: SharingStrategy
    replicas: int
    mig_strategy: MIGStrategy


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
    reject_unknown_keys("device plugin config", config, {"version", "flags", "sharing"})
    if config.get("version") != CONFIG_VERSION:
        raise InvalidSharingConfig(f"device plugin config version must be {CONFIG_VERSION!r}, not {config.get('version')!r}")

    flags = config.get("flags") or {}
    if not isinstance(flags, Mapping):
        raise InvalidSharingConfig("flags must be a mapping")
    reject_unknown_keys("flags", flags, _KNOWN_FLAGS)
    # The device plugin's own default is none.
    mig_strategy = flags.get("migStrategy", "none")
    if mig_strategy not in MIG_STRATEGIES:
        raise InvalidSharingConfig(f"unknown flags.migStrategy {mig_strategy!r} (valid: {', '.join(MIG_STRATEGIES)})")

    sharing = config.get("sharing") or {}
    if not isinstance(sharing, Mapping):
        raise InvalidSharingConfig("sharing must be a mapping")
    reject_unknown_keys("sharing", sharing, set(_SHARING_KEYS))
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
    reject_unknown_keys(f"sharing.{key}", body, _TIME_SLICING_KEYS if strategy == "time-slicing" else _MPS_KEYS)
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
        reject_unknown_keys(f"sharing.{key}.resources entry", resource, _RESOURCE_KEYS)
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
        check_configmap_key(key)
        try:
            validate_device_plugin_config(config)
        except InvalidSharingConfig as exc:
            raise InvalidSharingConfig(f"device plugin config {key}: {exc}") from None
        data[key] = to_yaml(plain_data(config))
    return managed_configmap(name, namespace, data)
