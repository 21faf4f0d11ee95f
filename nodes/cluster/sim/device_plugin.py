"""NVIDIA's device plugin and GPU feature discovery (GFD) in the simulator.

- The device plugin reads one ConfigMap of named configs; a node runs the config its
  `nvidia.com/device-plugin.config` label names (the operator default without one), and a changed
  label takes effect only when the plugin pod restarts (`restart_device_plugin`). It refuses to
  allocate several replicas of a shared GPU to one pod (failRequestsGreaterThanOne).
- GFD and the plugin publish what the running config and the MIG layout give: the sharing labels,
  the `-SHARED` product suffix, allocatable `nvidia.com/gpu` and, under the mixed MIG strategy,
  one `nvidia.com/mig-<profile>` resource (and count label) per profile.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any

import yaml

from nodes.cluster.base import ClusterError
from nodes.cluster.sim.gpus import catalog_model, decode_layout
from nodes.cluster.sim.objects import add_pod, delete_pod, hash_name, mark_running, owner_name, record_event, timestamp
from nodes.cluster.sim.store import State
from nodes.contract import (
    GPU_PRODUCT_SHARED_SUFFIX,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_COMPUTE_MAJOR,
    LABEL_GPU_COMPUTE_MINOR,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRESENT,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_MIG_CAPABLE,
    LABEL_MIG_STRATEGY,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
    RESOURCE_PREFIX_NVIDIA,
    STRATEGY_MPS,
    STRATEGY_NONE,
)
from nodes.sharing.configmap import GPU_OPERATOR_NAMESPACE
from nodes.sharing.device_plugin import (
    DEVICE_PLUGIN_CONFIGMAP,
    SharingSpec,
    check_mps_client_limit,
    device_plugin_configmap,
    validate_device_plugin_config,
)
from nodes.sharing.schema import InvalidSharingConfig

# The simulated GPU operator is installed with ClusterPolicy mig.strategy=mixed: MIG instances show
# up as nvidia.com/mig-<profile> next to whole GPUs. A device plugin config's flags.migStrategy
# overrides it once the plugin restarts with that config.
DEFAULT_MIG_STRATEGY = "mixed"
DEVICE_PLUGIN_DAEMONSET = "nvidia-device-plugin-daemonset"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
# GFD's per-profile count labels under the mixed strategy: nvidia.com/mig-<profile>.count.
_MIG_COUNT_LABEL = re.compile(rf"^{re.escape(RESOURCE_MIG_PREFIX)}.+\.count$")


def discovered_labels(product: str, gpu_count: int, gpu_memory_mib: int) -> dict[str, str]:
    """The labels GFD puts on a new GPU node before any sharing config or MIG layout applies.

    `nvidia.com/mig.capable` and the compute capability come from the catalog; an unknown product
    is not MIG capable and gets no compute capability labels.
    """
    model = catalog_model(product)
    labels = {
        LABEL_GPU_PRESENT: "true",
        LABEL_GPU_PRODUCT: product,
        LABEL_GPU_COUNT: str(gpu_count),
        LABEL_GPU_MEMORY: str(gpu_memory_mib),
        LABEL_GPU_REPLICAS: "1",
        LABEL_SHARING_STRATEGY: STRATEGY_NONE,
        LABEL_MIG_CAPABLE: "true" if model is not None and model.mig_capable else "false",
    }
    if model is not None:
        labels[LABEL_GPU_COMPUTE_MAJOR] = str(model.compute_capability[0])
        labels[LABEL_GPU_COMPUTE_MINOR] = str(model.compute_capability[1])
    return labels


def install_device_plugin(state: State, node: str, base_product: str, now: float) -> None:
    """Start the plugin on a new, stored GPU node of `base_product`, with the config its label names.

    Raises ClusterError, as `restart_device_plugin` does, when the plugin cannot run that config.
    """
    state["sim"]["nodes"][node] = {"base_product": base_product, "plugin": _spec_dict(None, _default_spec())}
    restart_device_plugin(state, node, now, new_node=True)


def check_device_plugin_config(name: str, config: dict[str, Any]) -> None:
    """ClusterError when `config` is not a config the plugin can run, as it would crash-loop on it."""
    try:
        validate_device_plugin_config(config)
    except InvalidSharingConfig as exc:
        raise ClusterError(f"device plugin config {name}: {exc}") from None


def put_device_plugin_config(state: State, name: str, config: dict[str, Any]) -> None:
    """Add or replace the named entry of the device plugin ConfigMap; ClusterError when it cannot hold it."""
    configs = _device_plugin_configs(state)
    configs[name] = config
    try:
        configmap = device_plugin_configmap(configs)
    except InvalidSharingConfig as exc:
        raise ClusterError(str(exc)) from None
    state["configmaps"][f"{GPU_OPERATOR_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP}"] = configmap


def restart_device_plugin(state: State, node: str, now: float, *, new_node: bool = False) -> None:
    """Replace the device plugin pod of `node`; the new one runs the config the node's label names.

    An unknown or invalid config, or one the node's GPUs cannot run (MPS on MIG-enabled GPUs or
    beyond the MPS client limit), raises ClusterError and changes nothing, as a crash-looping
    plugin would leave the advertised resources alone.
    """
    obj = state["nodes"][node]
    sim = state["sim"]["nodes"][node]
    config_name = obj["metadata"]["labels"].get(LABEL_DEVICE_PLUGIN_CONFIG)
    if config_name:
        configs = _device_plugin_configs(state)
        if config_name not in configs:
            raise ClusterError(
                f"device plugin on {node}: config {config_name!r} is not in ConfigMap "
                f"{GPU_OPERATOR_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP} (known: {', '.join(sorted(configs)) or 'none'})"
            )
        try:
            spec = validate_device_plugin_config(configs[config_name])
        except InvalidSharingConfig as exc:
            raise ClusterError(f"device plugin on {node}: config {config_name}: {exc}") from None
    else:
        spec = _default_spec()
    if spec.strategy == STRATEGY_MPS:
        layout = decode_layout(obj)
        if layout:
            raise ClusterError(
                f"device plugin on {node}: MPS shares only full GPUs, and GPU "
                f"{', '.join(str(i) for i in sorted(layout))} has MIG enabled"
            )
        model = catalog_model(sim["base_product"])
        if model is not None:
            try:
                check_mps_client_limit(spec.replicas, model.compute_capability)
            except InvalidSharingConfig as exc:
                raise ClusterError(f"device plugin on {node}: {exc}") from None
    sim["plugin"] = _spec_dict(config_name, spec)
    # A node just stored has no plugin pod to replace; skipping the scan of every pod keeps
    # adding a fleet of N nodes linear (each node's plugin pod makes that list grow with N).
    for key, pod in [] if new_node else list(state["pods"].items()):
        if pod["spec"].get("nodeName") == node and owner_name(pod) == DEVICE_PLUGIN_DAEMONSET:
            delete_pod(state, key)
    _start_plugin_pod(state, node, now)
    publish_node_resources(state, node)
    record_event(
        state, now, "Node", node, "Normal", "DevicePluginRestarted",
        f"device plugin config {config_name or '(default)'}: {spec.strategy}, {spec.replicas} replicas, "
        f"migStrategy {spec.mig_strategy}",
    )


def allocation_refusal(state: State, node: str, requests: dict[str, int]) -> str | None:
    """Why the node's device plugin refuses to allocate `requests` to one pod, or None when it can.

    The replicas of a shared GPU go one per pod (failRequestsGreaterThanOne).
    """
    plugin = state["sim"]["nodes"][node]["plugin"]
    if plugin["strategy"] != STRATEGY_NONE and requests.get(RESOURCE_GPU, 0) > 1:
        return (
            f"Allocate failed due to request for '{RESOURCE_GPU}: {requests[RESOURCE_GPU]}' too large: "
            f"maximum request size for shared resources is 1"
        )
    return None


def publish_node_resources(state: State, node: str) -> None:
    """What GFD and the device plugin advertise for the node's running plugin config and MIG layout."""
    obj = state["nodes"][node]
    sim = state["sim"]["nodes"][node]
    plugin = sim["plugin"]
    labels = obj["metadata"]["labels"]
    gpu_count = int(labels[LABEL_GPU_COUNT])
    replicas = plugin["replicas"]
    layout = decode_layout(obj)

    shared = plugin["strategy"] != STRATEGY_NONE
    # renameByDefault=false: GFD marks the product of a replicated GPU with "-SHARED".
    labels[LABEL_GPU_PRODUCT] = sim["base_product"] + (GPU_PRODUCT_SHARED_SUFFIX if shared else "")
    labels[LABEL_GPU_REPLICAS] = str(replicas)
    labels[LABEL_SHARING_STRATEGY] = plugin["strategy"]
    labels[LABEL_MIG_STRATEGY] = plugin["mig_strategy"]
    for key in [k for k in labels if _MIG_COUNT_LABEL.match(k)]:
        del labels[key]

    extended: dict[str, int] = {}
    if plugin["mig_strategy"] == "none" or not layout:
        # Strategy none enumerates whole GPUs and ignores MIG mode.
        extended[RESOURCE_GPU] = gpu_count * replicas
    elif plugin["mig_strategy"] == "mixed":
        extended[RESOURCE_GPU] = (gpu_count - len(layout)) * replicas
        mig_counts = Counter(device[0] for devices in layout.values() for device in devices)
        for profile, count in sorted(mig_counts.items()):
            extended[f"{RESOURCE_MIG_PREFIX}{profile}"] = count
            labels[f"{RESOURCE_MIG_PREFIX}{profile}.count"] = str(count)
    else:
        # single: every GPU must be MIG-enabled with one profile, each instance becomes an
        # nvidia.com/gpu; anything else leaves the plugin advertising nothing.
        profiles = {device[0] for devices in layout.values() for device in devices}
        instances = sum(len(devices) for devices in layout.values())
        valid = len(layout) == gpu_count and len(profiles) == 1
        extended[RESOURCE_GPU] = instances * replicas if valid else 0

    for field in ("capacity", "allocatable"):
        resources = {k: v for k, v in obj["status"][field].items() if not k.startswith(RESOURCE_PREFIX_NVIDIA)}
        resources.update({k: str(v) for k, v in extended.items()})
        obj["status"][field] = resources


def _start_plugin_pod(state: State, node: str, now: float) -> None:
    """The plugin's DaemonSet creates a new, Running plugin pod on `node`."""
    state["counter"] += 1
    pod_name = f"{DEVICE_PLUGIN_DAEMONSET}-{hash_name(node + '/' + str(state['counter']), 5)}"
    plugin_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": GPU_OPERATOR_NAMESPACE,
            "labels": {"app": DEVICE_PLUGIN_DAEMONSET},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": DEVICE_PLUGIN_DAEMONSET, "controller": True}
            ],
            "creationTimestamp": timestamp(now),
        },
        "spec": {"nodeName": node, "containers": [{"name": "nvidia-device-plugin", "image": DEVICE_PLUGIN_IMAGE}]},
        "status": {"phase": "Pending", "conditions": []},
    }
    add_pod(state, f"{GPU_OPERATOR_NAMESPACE}/{pod_name}", plugin_pod, deployment=None)
    mark_running(plugin_pod, now, ready=True)


def _device_plugin_configs(state: State) -> dict[str, Any]:
    configmap = state["configmaps"].get(f"{GPU_OPERATOR_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP}")
    data = (configmap or {}).get("data") or {}
    return {key: yaml.safe_load(text) for key, text in data.items()}


def _default_spec() -> SharingSpec:
    return SharingSpec(strategy=STRATEGY_NONE, replicas=1, mig_strategy=DEFAULT_MIG_STRATEGY)  # type: ignore[arg-type]


def _spec_dict(config_name: str | None, spec: SharingSpec) -> dict[str, Any]:
    return {"config": config_name, "strategy": spec.strategy, "replicas": spec.replicas, "mig_strategy": spec.mig_strategy}
