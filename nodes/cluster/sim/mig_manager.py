"""NVIDIA's MIG manager in the simulator: mig-parted configs applied through a node label.

A changed `nvidia.com/mig.config` label makes `nvidia.com/mig.config.state` `pending` and pauses
the device plugin (the node shows no allocatable GPUs); after the reconfiguration time the
manager applies the named config (from the mig-parted ConfigMap or the operator's built-in
`all-disabled` / `all-enabled`): `success` with the layout `nodes.mig.plan_layout` gives, or
`failed`, which keeps the previous layout (also forced for a config by an injected fault,
`faults.mig_fault_key`). Either way it then starts the device plugin again, which republishes the
node's resources after its restart delay: `success` comes before the allocatable does, as on a
real node. Both deadlines are kept in the state at the start, so every process agrees on them.
Like the real one it neither cordons nor drains the node: moving workloads off first is
gpuplane's job.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from nodes.catalog import GPUModel, UnknownGPUProduct, lookup_product
from nodes.cluster.base import ClusterError
from nodes.cluster.sim.device_plugin import pause_for_mig, resume_after_mig
from nodes.cluster.sim.faults import mig_fault_key, take_fault
from nodes.cluster.sim.gpus import decode_layout, encode_layout, mig_uuid
from nodes.cluster.sim.indexes import indexes
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


def start_reconfiguration(
    state: State, node: str, config_name: str, now: float, *, reconfigure_s: float, plugin_restart_s: float
) -> None:
    """The manager saw the node's `nvidia.com/mig.config` label change to `config_name`: state
    `pending`, the device plugin paused; done `reconfigure_s` from now, the plugin back
    `plugin_restart_s` after that."""
    state["nodes"][node]["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "pending"
    state["sim"]["nodes"][node]["mig"] = {
        "config": config_name, "since": now, "done_at": now + reconfigure_s, "plugin_restart_s": plugin_restart_s,
        "pending": True,
    }
    pause_for_mig(state, node, now)


def finish_reconfigurations(state: State, now: float, reconfigure_s: float) -> None:
    """Complete every reconfiguration due by `now`, by node name, each at its own deadline
    (`reconfigure_s` after its start for one begun before deadlines were stored)."""
    sim_nodes = state["sim"]["nodes"]
    for name in sorted(indexes(state).mig_pending):
        mig = sim_nodes.peek(name).get("mig")
        if mig and mig["pending"]:
            done_at = mig.get("done_at", mig["since"] + reconfigure_s)
            if now >= done_at:
                _finish(state, name, done_at)


def _finish(state: State, node: str, at: float) -> None:
    """Apply the pending mig-parted config (at time `at`): `success` with a new layout, or `failed`;
    then start the device plugin again."""
    obj = state["nodes"][node]
    sim = state["sim"]["nodes"][node]
    mig = sim["mig"]
    mig["pending"] = False
    try:
        injected = take_fault(state, mig_fault_key(mig["config"]))
        if injected is not None:
            raise ClusterError(injected)
        layout = _planned_layout(state, node, mig["config"])
    except (InvalidMIGLayout, UnknownGPUProduct, ClusterError) as exc:
        obj["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "failed"
        mig["error"] = str(exc)
        record_event(state, at, "Node", node, "Warning", "MIGConfigFailed", f"{mig['config']}: {exc}")
    else:
        mig.pop("error", None)
        encode_layout(obj, layout)
        obj["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "success"
        record_event(state, at, "Node", node, "Normal", "MIGConfigApplied", f"{mig['config']} applied")
    # The MIG manager restarts the device plugin and GFD after reconfiguring (or failing to),
    # with the config they ran before.
    resume_after_mig(state, node, at, mig.get("plugin_restart_s", 0.0))


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
