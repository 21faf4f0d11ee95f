"""NVIDIA's MIG manager in the simulator: mig-parted configs applied through a node label.

A changed `nvidia.com/mig.config` label makes `nvidia.com/mig.config.state` `pending`; after the
reconfiguration time the manager applies the named config (from the mig-parted ConfigMap or the
operator's built-in `all-disabled` / `all-enabled`): `success` with the layout
`nodes.mig.plan_layout` gives, after which the device plugin and GFD republish the node's
resources, or `failed`, which keeps the previous layout. Like the real one it neither cordons nor
drains the node: moving workloads off first is gpuplane's job.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from nodes.catalog import GPUModel, UnknownGPUProduct, lookup_product
from nodes.cluster.base import ClusterError
from nodes.cluster.sim.device_plugin import publish_node_resources
from nodes.cluster.sim.gpus import decode_layout, encode_layout, mig_uuid
from nodes.cluster.sim.objects import record_event
from nodes.cluster.sim.store import State
from nodes.contract import LABEL_GPU_COUNT, LABEL_MIG_CONFIG_STATE
from nodes.mig import InvalidMIGLayout, plan_layout
from nodes.sharing.configmap import GPU_OPERATOR_NAMESPACE
from nodes.sharing.mig_parted import (
    MIG_PARTED_CONFIGMAP,
    MIG_PARTED_CONFIGMAP_KEY,
    mig_parted_configmap,
    validate_mig_parted_config,
)
from nodes.sharing.schema import InvalidSharingConfig

# Configs the GPU operator's default mig-parted ConfigMap always has.
BUILTIN_MIG_CONFIGS: dict[str, list[dict[str, Any]]] = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
}


def put_mig_config(state: State, name: str, config: list[dict[str, Any]]) -> None:
    """Add or replace the named mig-parted config; ClusterError when its shape is malformed.

    Layouts are not checked here: one that does not fit a node's GPUs fails when applied.
    """
    configs: dict[str, list[Mapping[str, Any]]] = {
        key: list(entries) for key, entries in _mig_configs(state, include_builtin=False).items()
    }
    configs[name] = list(config)
    try:
        configmap = mig_parted_configmap(configs, check_layouts=False)
    except InvalidSharingConfig as exc:
        raise ClusterError(str(exc)) from None
    state["configmaps"][f"{GPU_OPERATOR_NAMESPACE}/{MIG_PARTED_CONFIGMAP}"] = configmap


def start_reconfiguration(state: State, node: str, config_name: str, now: float) -> None:
    """The manager saw the node's `nvidia.com/mig.config` label change to `config_name`: state `pending`."""
    state["nodes"][node]["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "pending"
    state["sim"]["nodes"][node]["mig"] = {"config": config_name, "since": now, "pending": True}


def finish_reconfigurations(state: State, now: float, reconfigure_s: float) -> None:
    """Complete every reconfiguration that has been pending for `reconfigure_s` seconds, by node name."""
    for name, sim in sorted(state["sim"]["nodes"].items()):
        mig = sim.get("mig")
        if mig and mig["pending"] and now >= mig["since"] + reconfigure_s:
            _finish(state, name, now)


def _finish(state: State, node: str, now: float) -> None:
    """Apply the pending mig-parted config: `success` with a new layout, or `failed`."""
    obj = state["nodes"][node]
    sim = state["sim"]["nodes"][node]
    mig = sim["mig"]
    mig["pending"] = False
    try:
        layout = _planned_layout(state, node, mig["config"])
    except (InvalidMIGLayout, UnknownGPUProduct, ClusterError) as exc:
        obj["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "failed"
        mig["error"] = str(exc)
        record_event(state, now, "Node", node, "Warning", "MIGConfigFailed", f"{mig['config']}: {exc}")
        return
    mig.pop("error", None)
    encode_layout(obj, layout)
    obj["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "success"
    # The MIG manager restarts the device plugin and GFD after reconfiguring, with the
    # config they already run.
    publish_node_resources(state, node)
    record_event(state, now, "Node", node, "Normal", "MIGConfigApplied", f"{mig['config']} applied")


def _planned_layout(state: State, node: str, config_name: str) -> dict[int, list[list[Any]]]:
    """The node's MIG layout after applying `config_name`: {gpu index: [[profile, start, size, uuid]]}."""
    configs = _mig_configs(state, include_builtin=True)
    if config_name not in configs:
        raise ClusterError(f"mig-parted config {config_name!r} not found (known: {', '.join(sorted(configs))})")
    obj = state["nodes"][node]
    product = state["sim"]["nodes"][node]["base_product"]
    gpu_count = int(obj["metadata"]["labels"][LABEL_GPU_COUNT])
    model: GPUModel | None = None
    layout = dict(decode_layout(obj))
    for entry in configs[config_name]:
        indexes = list(range(gpu_count)) if entry["devices"] == "all" else entry["devices"]
        missing = [i for i in indexes if i >= gpu_count]
        if missing:
            raise ClusterError(f"GPU {missing[0]} does not exist on {node} (it has {gpu_count})")
        if not entry["mig-enabled"]:
            for index in indexes:
                layout.pop(index, None)
            continue
        if model is None:
            model = lookup_product(product)
            if not model.mig_capable:
                raise ClusterError(f"{product} does not support MIG")
        placements = plan_layout(model, entry.get("mig-devices") or {})
        for index in indexes:
            layout[index] = [[p.profile, p.start, p.size, mig_uuid(node, index, p.profile, p.start)] for p in placements]
    return layout


def _mig_configs(state: State, *, include_builtin: bool) -> dict[str, list[dict[str, Any]]]:
    """The configs of the mig-parted ConfigMap, with the operator's built-in ones when `include_builtin`."""
    configs: dict[str, list[dict[str, Any]]] = copy.deepcopy(BUILTIN_MIG_CONFIGS) if include_builtin else {}
    configmap = state["configmaps"].get(f"{GPU_OPERATOR_NAMESPACE}/{MIG_PARTED_CONFIGMAP}")
    text = ((configmap or {}).get("data") or {}).get(MIG_PARTED_CONFIGMAP_KEY)
    if text:
        parsed = yaml.safe_load(text)
        validate_mig_parted_config(parsed, check_layouts=False)
        configs.update(parsed["mig-configs"])
    return configs
