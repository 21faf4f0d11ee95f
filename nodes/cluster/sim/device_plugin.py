"""NVIDIA's device plugin and GPU feature discovery (GFD) in the simulator.

- The device plugin reads one ConfigMap of named configs; a node runs the config its
  `nvidia.com/device-plugin.config` label names (the operator default without one), and a changed
  label takes effect only when the plugin pod restarts (`restart_device_plugin`), a delay after
  it: meanwhile the node has no allocatable GPUs and its old GFD labels. The MIG manager pauses
  the plugin while it reconfigures. It refuses to allocate several replicas of a shared GPU to one
  pod (failRequestsGreaterThanOne).
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
from nodes.cluster.sim.indexes import indexes
from nodes.cluster.sim.objects import (
    REMOVED_BY_CONTROLLER,
    REMOVED_DELETED,
    add_pod,
    hash_name,
    mark_running,
    owner_name,
    pods_on_node,
    record_event,
    remove_pod,
    timestamp,
)
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


def restart_device_plugin(state: State, node: str, now: float, *, delay_s: float = 0.0, new_node: bool = False) -> None:
    """Replace the device plugin pod of `node`; the new one runs the config the node's label names.

    The new pod is ready `delay_s` after the restart (at once when 0 or for a `new_node`); until
    then the node shows no allocatable NVIDIA resources (the kubelet marks a disconnected plugin's
    devices unhealthy) and its GFD labels stay as they were. The deadline is kept in the state, so
    every process sees the plugin come back at the same time. While the MIG manager has paused the
    plugin, the new config waits for it to resume. An unknown or invalid config, or one the
    node's GPUs cannot run (MPS on MIG-enabled GPUs or beyond the MPS client limit), raises
    ClusterError and changes nothing, as a crash-looping plugin would leave the advertised
    resources alone.
    """
    sim = state["sim"]["nodes"][node]
    config_name = state["nodes"][node]["metadata"]["labels"].get(LABEL_DEVICE_PLUGIN_CONFIG)
    plugin = _spec_dict(config_name, _configured_spec(state, node, config_name))
    # A node just stored has no plugin pod to replace; skipping the scan of every pod keeps
    # adding a fleet of N nodes linear (each node's plugin pod makes that list grow with N).
    if not new_node:
        _remove_plugin_pods(state, node, now, REMOVED_DELETED, "device plugin restarted")
    restart = sim.get("restart")
    if restart is not None and restart["ready_at"] is None:
        # Paused for a MIG reconfiguration: the DaemonSet starts no pod before the MIG manager resumes it.
        restart["plugin"] = plugin
        return
    if new_node or delay_s <= 0:
        sim.pop("restart", None)
        _start_plugin_pod(state, node, now)
        _run(state, node, plugin, now)
        return
    sim["restart"] = {"plugin": plugin, "ready_at": now + delay_s}
    _start_plugin_pod(state, node, now, ready=False)
    publish_node_resources(state, node)
    record_event(state, now, "Node", node, "Normal", "DevicePluginRestarting",
                 f"device plugin config {config_name or '(default)'}: ready in {delay_s:g} s")


def pause_for_mig(state: State, node: str, now: float) -> None:
    """The MIG manager stops the node's device plugin (and GFD) before it reconfigures the GPUs."""
    sim = state["sim"]["nodes"][node]
    restart = sim.get("restart")
    sim["restart"] = {"plugin": restart["plugin"] if restart else sim["plugin"], "ready_at": None}
    _remove_plugin_pods(state, node, now, REMOVED_BY_CONTROLLER, "device plugin paused for a MIG reconfiguration")
    publish_node_resources(state, node)


def resume_after_mig(state: State, node: str, at: float, delay_s: float) -> None:
    """The MIG manager is done (at `at`): the plugin starts again and is ready `delay_s` later."""
    restart = state["sim"]["nodes"][node].get("restart")
    if restart is None:
        # Not paused (a reconfiguration begun before the simulator paused plugins): republish at once.
        publish_node_resources(state, node)
        return
    if restart["ready_at"] is not None:
        return
    restart["ready_at"] = at + delay_s
    _start_plugin_pod(state, node, at, ready=False)


def finish_restarts(state: State, now: float) -> None:
    """Every plugin pod whose restart is due by `now` becomes ready and publishes its config, by node name."""
    nodes = state["sim"]["nodes"]
    due = sorted(name for name, ready_at in indexes(state).plugin_restarts.items() if now >= ready_at)
    for name in due:
        restart = nodes[name].pop("restart")
        for pod in _plugin_pods(state, name).values():
            mark_running(pod, restart["ready_at"], ready=True)
        _run(state, name, restart["plugin"], restart["ready_at"])


def restarting(state: State, node: str) -> bool:
    """True while the node's device plugin is down: restarting, or paused by the MIG manager."""
    return "restart" in state["sim"]["nodes"][node]


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
    """What GFD and the device plugin advertise for the node's running plugin config and MIG layout.

    While the plugin is down (`restarting`) the kubelet shows none of its resources allocatable
    (capacity stays), and GFD's labels stay as the last running plugin left them.
    """
    obj = state["nodes"][node]
    sim = state["sim"]["nodes"][node]
    if restarting(state, node):
        obj["status"]["allocatable"] = {
            key: ("0" if key.startswith(RESOURCE_PREFIX_NVIDIA) else value)
            for key, value in obj["status"]["allocatable"].items()
        }
        return
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


def _configured_spec(state: State, node: str, config_name: str | None) -> SharingSpec:
    """The config the plugin of `node` would run: the named one, checked against the node's GPUs."""
    obj = state["nodes"][node]
    sim = state["sim"]["nodes"][node]
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
    return spec


def _run(state: State, node: str, plugin: dict[str, Any], now: float) -> None:
    """The plugin pod of `node` is up with `plugin` (a `_spec_dict`): it and GFD publish what it gives."""
    state["sim"]["nodes"][node]["plugin"] = plugin
    publish_node_resources(state, node)
    record_event(
        state, now, "Node", node, "Normal", "DevicePluginRestarted",
        f"device plugin config {plugin['config'] or '(default)'}: {plugin['strategy']}, {plugin['replicas']} replicas, "
        f"migStrategy {plugin['mig_strategy']}",
    )


def _plugin_pods(state: State, node: str) -> dict[str, dict[str, Any]]:
    pods = state["pods"]
    return {
        key: pods[key] for key in pods_on_node(state, node) if owner_name(pods.peek(key)) == DEVICE_PLUGIN_DAEMONSET
    }


def _remove_plugin_pods(state: State, node: str, now: float, reason: str, message: str) -> None:
    for key in list(_plugin_pods(state, node)):
        remove_pod(state, now, key, reason, message)


def _start_plugin_pod(state: State, node: str, now: float, *, ready: bool = True) -> None:
    """The plugin's DaemonSet creates a new plugin pod on `node`: Running and Ready, or still
    starting (Pending) until its restart is done."""
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
    if ready:
        mark_running(plugin_pod, now, ready=True)


def _device_plugin_configs(state: State) -> dict[str, Any]:
    configmap = state["configmaps"].get(f"{GPU_OPERATOR_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP}")
    data = (configmap or {}).get("data") or {}
    return {key: yaml.safe_load(text) for key, text in data.items()}


def _default_spec() -> SharingSpec:
    return SharingSpec(strategy=STRATEGY_NONE, replicas=1, mig_strategy=DEFAULT_MIG_STRATEGY)  # type: ignore[arg-type]


def _spec_dict(config_name: str | None, spec: SharingSpec) -> dict[str, Any]:
    return {"config": config_name, "strategy": spec.strategy, "replicas": spec.replicas, "mig_strategy": spec.mig_strategy}
