"""A node's sharing config as one value: ``{"mode", "replicas", "mig_layout"}``, and how it reaches NVIDIA.

Pure Python (no Django). This is the shape of a node's ``desired_config`` and ``applied_config``
in the API and of a rollout's target config (issue 9's contract):

- ``exclusive``: whole GPUs; ``replicas`` and ``mig_layout`` are null;
- ``mps``: the device plugin's MPS with R uniform clients per GPU (2 <= R <= the GPU's MPS client
  limit: 48 from compute capability 7.5, 16 before);
- ``mps-weighted``: the device plugin's time-slicing admitting up to R pods per GPU, under
  gpuplane's own MPS daemon (same client limit, since every pod is an MPS client);
- ``timeslice``: time-slicing with R >= 2 replicas per GPU;
- ``mig``: ``mig_layout`` maps MIG profile names to counts, the same layout on every GPU of the
  node (mig-parted ``devices: all``), checked by ``nodes.mig.plan_layout`` for the node's model.

Rendering gives the named device-plugin config (the value of ``nvidia.com/device-plugin.config``)
and the named mig-parted config (the value of ``nvidia.com/mig.config``), built with
``nodes.sharing.device_plugin`` and ``nodes.sharing.mig_parted`` so they pass NVIDIA's checks.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodes.catalog import GPUModel, find_model
from nodes.contract import (
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_MIG_CONFIG,
    LABEL_SHARING_MODE,
    SHARING_MODE_LABEL_WEIGHTED,
)
from nodes.sharing.device_plugin import check_mps_client_limit, device_plugin_config, device_plugin_configmap
from nodes.sharing.mig_parted import mig_parted_configmap, validate_mig_entries
from nodes.sharing.schema import InvalidSharingConfig
from nodes.vocabulary import SharingMode

CONFIG_KEYS = ("mode", "replicas", "mig_layout")
REPLICATED_MODES = frozenset({SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE})

CONFIG_NAME_PREFIX = "gpuplane-"
# mig-parted's own name for "MIG off on every GPU" (its example configs and the GPU operator's default).
MIG_DISABLED_CONFIG = "all-disabled"
# Kubernetes label values are at most 63 characters.
_LABEL_VALUE_MAX = 63


class InvalidNodeConfig(InvalidSharingConfig):
    """A node sharing config gpuplane refuses; ``field`` names the key at fault (for a 400's field messages)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def field_errors(self) -> dict[str, list[str]]:
        """``{field: [message]}``, the body of a 400 (DRF's ``ValidationError`` detail shape)."""
        return {self.field: [str(self)]}


ModelRef = GPUModel | str | None


@dataclass(frozen=True)
class NodeConfig:
    """One node's sharing config. Build it with ``parse_node_config`` (validating) or ``NodeConfig.of``.

    ``mig_layout`` is kept as sorted ``(profile, count)`` pairs so configs compare and hash by value.
    """

    mode: SharingMode
    replicas: int | None = None
    mig_layout: tuple[tuple[str, int], ...] | None = None

    @classmethod
    def of(cls, mode: str, replicas: int | None = None, mig_layout: Mapping[str, int] | None = None) -> NodeConfig:
        """A config from its parts, without validation (use ``parse_node_config`` for input)."""
        layout = tuple(sorted(mig_layout.items(), key=_profile_order)) if mig_layout is not None else None
        return cls(SharingMode(mode), replicas, layout)

    def as_dict(self) -> dict[str, Any]:
        """The API shape: ``{"mode": ..., "replicas": R or None, "mig_layout": {profile: count} or None}``."""
        return {
            "mode": self.mode.value,
            "replicas": self.replicas,
            "mig_layout": dict(self.mig_layout) if self.mig_layout is not None else None,
        }

    def describe(self) -> str:
        """Short words for logs and plan reasons: "MPS x4", "MIG 1x3g.40gb + 2x2g.20gb", "exclusive"."""
        if self.mode == SharingMode.MIG and self.mig_layout:
            return "MIG " + " + ".join(f"{count}x{profile}" for profile, count in self.mig_layout)
        if self.replicas is not None:
            return f"{self.mode.value} x{self.replicas}"
        return self.mode.value


def parse_node_config(data: Any, *, model: ModelRef = None) -> NodeConfig:
    """Validate ``data`` (the API shape) for a node whose GPUs are ``model`` (a GPUModel or catalog key).

    Raises ``InvalidNodeConfig`` naming the field: unknown keys; a mode not in SharingMode;
    ``replicas`` set for exclusive or mig, missing or < 2 for the replicated modes, or above the
    GPU's MPS client limit for mps and mps-weighted; ``mig_layout`` set outside mig, or for mig
    empty, malformed, on a model without MIG, or a layout that does not fit (the MIG planner's
    reason). Without ``model`` the layout must fit some catalog model having those profiles, and
    the MPS limit is the larger one (48). Nothing is touched: this only reads ``data``.
    """
    if not isinstance(data, Mapping):
        raise InvalidNodeConfig("non_field_errors", f"a sharing config is an object with {', '.join(CONFIG_KEYS)}")
    unknown = sorted(str(key) for key in data if key not in CONFIG_KEYS)
    if unknown:
        raise InvalidNodeConfig(unknown[0], f"unknown key {unknown[0]!r} (allowed: {', '.join(CONFIG_KEYS)})")
    raw_mode = data.get("mode")
    if raw_mode not in SharingMode.values():
        raise InvalidNodeConfig("mode", f"mode must be one of {', '.join(SharingMode.values())}, not {raw_mode!r}")
    mode = SharingMode(raw_mode)
    gpu = find_model(model) if isinstance(model, str) else model
    replicas = _check_replicas(mode, data.get("replicas"), gpu)
    layout = _check_layout(mode, data.get("mig_layout"), gpu)
    return NodeConfig.of(mode, replicas, layout)


def _check_replicas(mode: SharingMode, replicas: Any, gpu: GPUModel | None) -> int | None:
    if mode not in REPLICATED_MODES:
        if replicas is not None:
            raise InvalidNodeConfig("replicas", f"replicas must be null for mode {mode.value}: it does not replicate GPUs")
        return None
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
        raise InvalidNodeConfig(
            "replicas", f"mode {mode.value} needs replicas, an integer >= 2 (the device plugin's minimum), not {replicas!r}"
        )
    if mode in (SharingMode.MPS, SharingMode.MPS_WEIGHTED):
        try:
            check_mps_client_limit(replicas, gpu.compute_capability if gpu is not None else (9, 0))
        except InvalidSharingConfig as exc:
            raise InvalidNodeConfig("replicas", str(exc)) from None
    return replicas


def _check_layout(mode: SharingMode, layout: Any, gpu: GPUModel | None) -> dict[str, int] | None:
    if mode != SharingMode.MIG:
        if layout is not None:
            raise InvalidNodeConfig("mig_layout", f"mig_layout must be null for mode {mode.value}")
        return None
    if not isinstance(layout, Mapping) or not layout:
        raise InvalidNodeConfig(
            "mig_layout", 'mode mig needs mig_layout, a non-empty object of profile to count, e.g. {"3g.40gb": 1}'
        )
    if gpu is not None and not gpu.mig_capable:
        raise InvalidNodeConfig("mig_layout", f"{gpu.name} has no MIG: mode mig is not possible on this node")
    counts = dict(layout)
    try:
        # mig-parted's own entry checks (profile names, counts >= 1) plus the MIG planner's geometry.
        validate_mig_entries([_mig_entry(counts)], model=gpu)
    except InvalidSharingConfig as exc:
        raise InvalidNodeConfig("mig_layout", str(exc).removeprefix("entry 0: ")) from None
    return counts


# ---- rendering into NVIDIA's formats ------------------------------------------------------------


def device_plugin_config_name(config: NodeConfig) -> str:
    """The device-plugin config this node config selects: the value of ``nvidia.com/device-plugin.config``."""
    if config.mode == SharingMode.MIG:
        return f"{CONFIG_NAME_PREFIX}mig-mixed"
    if config.mode == SharingMode.EXCLUSIVE:
        return f"{CONFIG_NAME_PREFIX}exclusive"
    word = {SharingMode.MPS: "mps", SharingMode.TIMESLICE: "timeslice", SharingMode.MPS_WEIGHTED: "weighted"}[config.mode]
    return f"{CONFIG_NAME_PREFIX}{word}-{config.replicas}"


def render_device_plugin_config(config: NodeConfig) -> tuple[str, dict[str, Any]]:
    """``(name, config)``: the named k8s-device-plugin v1 config for this node config.

    MIG nodes expose their instances with ``migStrategy: mixed`` (one ``nvidia.com/mig-<profile>``
    resource per profile, as gpuplane's MIG partitions expect); weighted MPS is time-slicing with
    R replicas, gpuplane's MPS daemon dividing the GPU.
    """
    name = device_plugin_config_name(config)
    if config.mode == SharingMode.MIG:
        return name, device_plugin_config("none", mig_strategy="mixed")
    if config.mode == SharingMode.EXCLUSIVE:
        return name, device_plugin_config("none")
    if config.mode == SharingMode.MPS:
        return name, device_plugin_config("mps", config.replicas or 0)
    return name, device_plugin_config("time-slicing", config.replicas or 0)


def mig_config_name(config: NodeConfig) -> str:
    """The mig-parted config this node config selects: the value of ``nvidia.com/mig.config``.

    ``all-disabled`` outside MIG; for MIG the layout spelt out ("gpuplane-mig-1x3g.40gb-2x2g.20gb"),
    so one name always means one layout, cut to a label value's 63 characters with a stable digest.
    """
    if config.mode != SharingMode.MIG or not config.mig_layout:
        return MIG_DISABLED_CONFIG
    name = f"{CONFIG_NAME_PREFIX}mig-" + "-".join(f"{count}x{profile}" for profile, count in config.mig_layout)
    if len(name) <= _LABEL_VALUE_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: _LABEL_VALUE_MAX - 11]}-{digest}"


def render_mig_parted_entries(config: NodeConfig) -> tuple[str, list[dict[str, Any]]]:
    """``(name, entries)``: the named mig-parted config, one entry for ``devices: all``."""
    if config.mode != SharingMode.MIG or not config.mig_layout:
        return MIG_DISABLED_CONFIG, [{"devices": "all", "mig-enabled": False}]
    return mig_config_name(config), [_mig_entry(dict(config.mig_layout))]


def render_configmaps(configs: Iterable[NodeConfig], *, model: ModelRef = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The device-plugin ConfigMap and the mig-parted ConfigMap holding every named config ``configs`` select.

    Each distinct config appears once under its name (``all-disabled`` is always in the mig-parted
    one, so a node can always leave MIG); both documents pass NVIDIA's checks, the MIG layouts for
    ``model`` when given. The GPU operator reads them from its namespace (ClusterPolicy
    ``devicePlugin.config.name`` and ``migManager.config.name``).
    """
    plugin: dict[str, dict[str, Any]] = {}
    mig: dict[str, list[dict[str, Any]]] = dict([render_mig_parted_entries(NodeConfig(SharingMode.EXCLUSIVE))])
    for config in configs:
        name, body = render_device_plugin_config(config)
        plugin[name] = body
        mig_name, entries = render_mig_parted_entries(config)
        mig[mig_name] = entries
    return (
        device_plugin_configmap(dict(sorted(plugin.items()))),
        mig_parted_configmap({name: list[Mapping[str, Any]](entries) for name, entries in sorted(mig.items())}, model=model),
    )


def node_labels(config: NodeConfig, *, mig_capable: bool) -> dict[str, str | None]:
    """The labels that apply ``config`` to a node (None removes a label).

    The MIG label only on MIG-capable GPUs (the MIG manager runs nowhere else); gpuplane's own
    ``gpuplane.io/sharing-mode=mps-weighted`` marks weighted MPS on top of the time-slicing config.
    """
    labels: dict[str, str | None] = {LABEL_DEVICE_PLUGIN_CONFIG: device_plugin_config_name(config)}
    if mig_capable:
        labels[LABEL_MIG_CONFIG] = mig_config_name(config)
    labels[LABEL_SHARING_MODE] = SHARING_MODE_LABEL_WEIGHTED if config.mode == SharingMode.MPS_WEIGHTED else None
    return labels


# ---- what the cluster proves --------------------------------------------------------------------


def applied_node_config(mode: str, replicas: int, gpu_layouts: Iterable[Mapping[str, int]] = ()) -> NodeConfig:
    """The config a node is proven to run, from inventory: its mode and R (from GFD labels) and, on
    MIG nodes, the MIG instance counts of each MIG-enabled GPU.

    ``mig_layout`` is null when the GPUs' layouts differ (one value cannot say it; the node's
    partitions can) or none is known yet.
    """
    sharing = SharingMode(mode)
    if sharing == SharingMode.MIG:
        layouts = {tuple(sorted(layout.items(), key=_profile_order)) for layout in gpu_layouts if layout}
        return NodeConfig(sharing, None, layouts.pop() if len(layouts) == 1 else None)
    return NodeConfig(sharing, replicas if sharing in REPLICATED_MODES else None, None)


def _mig_entry(counts: Mapping[str, int]) -> dict[str, Any]:
    return {"devices": "all", "mig-enabled": True, "mig-devices": dict(counts)}


def _profile_order(item: tuple[str, int]) -> tuple[int, str]:
    # Largest instances first ("3g.40gb" before "1g.10gb"), as NVIDIA's examples list them.
    profile = item[0]
    head = profile.split("g.", 1)[0]
    return (-int(head) if head.isdigit() else 0, profile)
