"""SimulatedCluster: the embedded stand-in for Kubernetes, NVIDIA's device plugin, GFD and MIG manager.

The simulator stores Kubernetes-shaped JSON objects (Node, Pod, apps/v1 Deployment, policy/v1
PodDisruptionBudget, the GPU operator's ConfigMaps) and answers `list_nodes` / `list_gpu_pods`
through `nodes.cluster.parsing`, so the control plane reads it exactly as it reads a real cluster.
What it simulates (DESIGN.md sections 4, 5, 9):

- GFD labels and allocatable extended resources of GPU nodes;
- the device plugin: a node's `nvidia.com/device-plugin.config` label takes effect only when the
  plugin pod restarts (`restart_device_plugin`), which rewrites the sharing labels, the `-SHARED`
  product suffix and allocatable `nvidia.com/gpu`;
- the MIG manager: a `nvidia.com/mig.config` label change goes `pending`, then `success` (layout
  from `nodes.mig.plan_layout`, mixed-strategy `nvidia.com/mig-*` resources) or `failed` after
  `mig_reconfigure_s`; it neither cordons nor drains;
- the scheduler and kubelet: pods bind where the node is Ready, schedulable, has no untolerated
  taint and has free allocatable extended resources, else stay Pending with the scheduler's
  "0/N nodes are available" message; bound pods become Running and Ready after
  `pod_ready_delay_s`;
- the Deployment/ReplicaSet controller (a deleted or evicted pod is recreated under a new name),
  the Eviction API with PodDisruptionBudgets, and injectable faults.

Time is lazy: every call first advances the simulation to the clock's now, so a fake clock makes
tests deterministic. State lives in one JSON file, read-modify-written under an exclusive
`fcntl.flock` on a side lock file and replaced atomically, so several processes (web, worker,
demo loader) share one cluster. Names and UUIDs are derived by hashing, never drawn at random.
"""
from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml

from nodes.catalog import GPUModel, UnknownGPUProduct, lookup_product
from nodes.cluster.base import ClusterError, ClusterNode, ClusterPod, EvictionBlocked, NotFound, WorkloadSpec
from nodes.cluster.manifests import deployment_manifest, pinned_node
from nodes.cluster.parsing import parse_node, parse_pod, parse_quantity
from nodes.contract import (
    ANNOTATION_ASSIGNED_GPUS,
    ANNOTATION_GPU_UUIDS,
    ANNOTATION_MIG_LAYOUT,
    ANNOTATION_MIG_START,
    ANNOTATION_SHARE_MILLI,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_MIG_CONFIG,
    LABEL_MIG_CONFIG_STATE,
    LABEL_MIG_STRATEGY,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
)
from nodes.mig import InvalidMIGLayout, plan_layout
from nodes.sharing import (
    DEVICE_PLUGIN_CONFIGMAP,
    GPU_OPERATOR_NAMESPACE,
    MIG_PARTED_CONFIGMAP,
    MIG_PARTED_CONFIGMAP_KEY,
    InvalidSharingConfig,
    SharingSpec,
    check_mps_client_limit,
    device_plugin_configmap,
    mig_parted_configmap,
    validate_device_plugin_config,
    validate_mig_parted_config,
)

T = TypeVar("T")

STATE_VERSION = 1
# Namespace of the deterministic GPU and MIG UUIDs: the same node name always gets the same UUIDs.
UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "simulated-cluster.gpuplane.io")
# The simulated GPU operator is installed with ClusterPolicy mig.strategy=mixed: MIG instances show
# up as nvidia.com/mig-<profile> next to whole GPUs. A device plugin config's flags.migStrategy
# overrides it once the plugin restarts with that config.
DEFAULT_MIG_STRATEGY = "mixed"
DEVICE_PLUGIN_DAEMONSET = "nvidia-device-plugin-daemonset"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
EVICTION_BLOCKED_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
# Configs the GPU operator's default mig-parted ConfigMap always has.
BUILTIN_MIG_CONFIGS: dict[str, list[dict[str, Any]]] = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
}
OPERATIONS = frozenset(
    {
        "list_nodes",
        "list_gpu_pods",
        "set_node_labels",
        "cordon",
        "uncordon",
        "evict_pod",
        "create_workload",
        "scale_workload",
        "delete_workload",
        "workload_ready",
        "restart_device_plugin",
    }
)
_MAX_EVENTS = 200
# Kubernetes' alphabet for generated name suffixes (no vowels, no look-alike characters).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MIG_COUNT_LABEL = re.compile(r"^nvidia\.com/mig-.+\.count$")
_TERMINAL_PHASES = ("Succeeded", "Failed")
_UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def gpu_uuid(node: str, index: int) -> str:
    """The simulated UUID of GPU `index` on `node` ("GPU-" + uuid5)."""
    return f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{node}/{index}')}"


def mig_uuid(node: str, index: int, profile: str, start: int) -> str:
    """The simulated UUID of the MIG instance `profile` at memory slice `start` of GPU `index`."""
    return f"MIG-{uuid.uuid5(UUID_NAMESPACE, f'{node}/{index}/{profile}/{start}')}"


class SimulatedCluster:
    """A ClusterBackend over a JSON state file; see the module docstring for what it simulates.

    `clock` is a callable returning seconds (like `time.time`) or an object with a numeric `now`
    attribute. Every ClusterBackend method first consumes an injected fault, if one is queued.
    """

    def __init__(
        self,
        state_path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] | Any = time.time,
        pod_ready_delay_s: float = 2.0,
        mig_reconfigure_s: float = 5.0,
    ) -> None:
        self.state_path = Path(state_path)
        self.lock_path = self.state_path.with_name(self.state_path.name + ".lock")
        self._clock = clock
        self.pod_ready_delay_s = pod_ready_delay_s
        self.mig_reconfigure_s = mig_reconfigure_s

    # --- ClusterBackend ------------------------------------------------------------------------

    def list_nodes(self) -> list[ClusterNode]:
        return self._operate("list_nodes", lambda s, now: [parse_node(s["nodes"][n]) for n in sorted(s["nodes"])])

    def list_gpu_pods(self) -> list[ClusterPod]:
        """Pods (all namespaces) that request an nvidia.com/gpu or nvidia.com/mig-* resource."""

        def action(state: dict[str, Any], now: float) -> list[ClusterPod]:
            pods = (parse_pod(state["pods"][key]) for key in sorted(state["pods"]))
            return [pod for pod in pods if pod is not None]

        return self._operate("list_gpu_pods", action)

    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Merge labels; a None value removes the label.

        A changed `nvidia.com/mig.config` starts the MIG manager (state `pending`); a changed
        `nvidia.com/device-plugin.config` does nothing until `restart_device_plugin`.
        """

        def action(state: dict[str, Any], now: float) -> None:
            obj = self._node(state, node)
            current = obj["metadata"].setdefault("labels", {})
            old_mig_config = current.get(LABEL_MIG_CONFIG)
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = str(value)
            new_mig_config = current.get(LABEL_MIG_CONFIG)
            # The MIG manager reacts to label changes only, as the real one (a watch) does.
            if new_mig_config is not None and new_mig_config != old_mig_config:
                self._start_mig(state, node, new_mig_config, now)

        self._operate("set_node_labels", action)

    def cordon(self, node: str) -> None:
        """Mark the node unschedulable (and, as the node lifecycle controller does, taint it)."""

        def action(state: dict[str, Any], now: float) -> None:
            spec = self._node(state, node).setdefault("spec", {})
            spec["unschedulable"] = True
            taints = spec.setdefault("taints", [])
            if not any(t.get("key") == _UNSCHEDULABLE_TAINT for t in taints):
                taints.append({"key": _UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": _timestamp(now)})

        self._operate("cordon", action)

    def uncordon(self, node: str) -> None:
        def action(state: dict[str, Any], now: float) -> None:
            spec = self._node(state, node).setdefault("spec", {})
            spec.pop("unschedulable", None)
            taints = [t for t in spec.get("taints") or [] if t.get("key") != _UNSCHEDULABLE_TAINT]
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)

        self._operate("uncordon", action)

    def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the simulated Eviction API.

        Raises NotFound for an unknown pod, ClusterError for a DaemonSet pod (drains leave them
        alone) or a pod matched by several PodDisruptionBudgets, and EvictionBlocked (HTTP 429)
        when evicting would leave fewer healthy pods than a budget's minAvailable. Pending,
        Succeeded and Failed pods ignore budgets, as in Kubernetes. An evicted Deployment pod is
        recreated by its ReplicaSet under a new name.
        """

        def action(state: dict[str, Any], now: float) -> None:
            key = f"{namespace}/{name}"
            pod = state["pods"].get(key)
            if pod is None:
                raise NotFound(f'pods "{name}" not found in namespace {namespace}')
            if _owner_kind(pod) == "DaemonSet":
                raise ClusterError(f"cannot evict pod {key}: it is managed by a DaemonSet")
            budgets = [
                pdb
                for pdb_key, pdb in sorted(state["pdbs"].items())
                if pdb_key.startswith(f"{namespace}/") and _selector_matches(pdb, pod)
            ]
            if len(budgets) > 1:
                raise ClusterError(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                )
            if budgets and _phase(pod) not in ("Pending", *_TERMINAL_PHASES):
                self._check_budget(state, budgets[0], pod)
            self._delete_pod(state, key)
            self._event(state, now, "Pod", key, "Normal", "Evicted", "evicted through the Eviction API")

        self._operate("evict_pod", action)

    def create_workload(self, spec: WorkloadSpec) -> None:
        """Store the Deployment and create its pods; like `kubectl apply`, an existing one is updated.

        A changed pod template replaces all pods of the Deployment (the Recreate strategy).
        """

        def action(state: dict[str, Any], now: float) -> None:
            if spec.replicas < 0:
                raise ClusterError(f"spec.replicas of deployment {spec.name} must be >= 0, not {spec.replicas}")
            manifest = deployment_manifest(spec)
            key = f"{spec.namespace}/{spec.name}"
            existing = state["deployments"].get(key)
            manifest["metadata"]["creationTimestamp"] = _timestamp(now)
            manifest["metadata"]["generation"] = 1
            if existing is not None:
                manifest["metadata"]["creationTimestamp"] = existing["metadata"]["creationTimestamp"]
                manifest["metadata"]["generation"] = existing["metadata"].get("generation", 1) + 1
                if existing["spec"]["template"] != manifest["spec"]["template"]:
                    for pod_key in self._deployment_pods(state, key):
                        self._delete_pod(state, pod_key)
            state["deployments"][key] = manifest

        self._operate("create_workload", action)

    def scale_workload(self, namespace: str, name: str, replicas: int) -> None:
        def action(state: dict[str, Any], now: float) -> None:
            deployment = self._deployment(state, namespace, name)
            if replicas < 0:
                raise ClusterError(f"spec.replicas of deployment {name} must be >= 0, not {replicas}")
            deployment["spec"]["replicas"] = replicas
            deployment["metadata"]["generation"] = deployment["metadata"].get("generation", 1) + 1

        self._operate("scale_workload", action)

    def delete_workload(self, namespace: str, name: str) -> None:
        """Delete the Deployment and its pods; NotFound when there is none."""

        def action(state: dict[str, Any], now: float) -> None:
            self._deployment(state, namespace, name)
            key = f"{namespace}/{name}"
            for pod_key in self._deployment_pods(state, key):
                self._delete_pod(state, pod_key)
            del state["deployments"][key]

        self._operate("delete_workload", action)

    def workload_ready(self, namespace: str, name: str) -> bool:
        """True when as many pods of the Deployment are Ready as it has replicas."""

        def action(state: dict[str, Any], now: float) -> bool:
            deployment = self._deployment(state, namespace, name)
            pods = self._deployment_pods(state, f"{namespace}/{name}")
            ready = sum(1 for key in pods if _is_ready(state["pods"][key]))
            return ready >= deployment["spec"]["replicas"]

        return self._operate("workload_ready", action)

    def restart_device_plugin(self, node: str) -> None:
        """Delete the node's device plugin pod; its replacement reads the node's config label.

        The config named by `nvidia.com/device-plugin.config` (the operator default when the
        label is absent) then drives the GFD labels and allocatable `nvidia.com/gpu`. An unknown
        or invalid config, or one the node's GPUs cannot run, raises ClusterError and changes
        nothing, as a crash-looping plugin would leave the advertised resources alone.
        """

        def action(state: dict[str, Any], now: float) -> None:
            self._node(state, node)
            self._apply_device_plugin_config(state, node, now)

        self._operate("restart_device_plugin", action)

    # --- seeding and simulation control ---------------------------------------------------------

    def reset(self) -> None:
        """Empty the cluster: no nodes, pods, workloads, budgets, configs or faults."""
        with self._transaction() as state:
            state.clear()
            state.update(_empty_state())

    def is_empty(self) -> bool:
        """True when the cluster has no nodes."""
        with self._transaction() as state:
            return not state["nodes"]

    def add_gpu_node(
        self,
        name: str,
        *,
        product: str,
        gpu_count: int,
        gpu_memory_mib: int,
        cpu_milli: int = 64000,
        memory_mib: int = 524288,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, Any]] | None = None,
    ) -> None:
        """Add a Ready GPU node as GFD and the device plugin would publish it.

        Labels: `nvidia.com/gpu.product`, `.count`, `.memory` (MiB), `gpu.replicas=1`,
        `gpu.sharing-strategy=none`, `mig.capable` (from the catalog; false for an unknown
        product), `mig.strategy`, compute capability; `labels` are merged over them. A
        `nvidia.com/device-plugin.config` label is read by the plugin as it starts, a
        `nvidia.com/mig.config` one starts the MIG manager. Annotation `gpuplane.io/gpu-uuids`
        holds `gpu_uuid(name, i)` per GPU. Raises ClusterError when the node exists (or a config
        label names a config the plugin cannot run), ValueError when `gpu_count` < 1.
        """
        if gpu_count < 1:
            raise ValueError(f"a GPU node has at least one GPU, not {gpu_count}")
        with self._transaction() as state:
            now = self._now()
            if name in state["nodes"]:
                raise ClusterError(f'nodes "{name}" already exists')
            model = _catalog_model(product)
            node_labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.present": "true",
                LABEL_GPU_PRODUCT: product,
                LABEL_GPU_COUNT: str(gpu_count),
                LABEL_GPU_MEMORY: str(gpu_memory_mib),
                LABEL_GPU_REPLICAS: "1",
                LABEL_SHARING_STRATEGY: "none",
                "nvidia.com/mig.capable": "true" if model is not None and model.mig_capable else "false",
            }
            if model is not None:
                node_labels["nvidia.com/gpu.compute.major"] = str(model.compute_capability[0])
                node_labels["nvidia.com/gpu.compute.minor"] = str(model.compute_capability[1])
            node_labels.update({key: str(value) for key, value in (labels or {}).items()})
            base_resources = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": "110"}
            obj: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": node_labels,
                    "annotations": {ANNOTATION_GPU_UUIDS: ",".join(gpu_uuid(name, i) for i in range(gpu_count))},
                    "creationTimestamp": _timestamp(now),
                },
                "spec": {"taints": [dict(t) for t in taints]} if taints else {},
                "status": {
                    "capacity": dict(base_resources),
                    "allocatable": dict(base_resources),
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastTransitionTime": _timestamp(now),
                        }
                    ],
                },
            }
            state["nodes"][name] = obj
            state["sim"]["nodes"][name] = {"base_product": product, "plugin": _spec_dict(None, _default_spec())}
            self._apply_device_plugin_config(state, name, now)
            if node_labels.get(LABEL_MIG_CONFIG):
                self._start_mig(state, name, node_labels[LABEL_MIG_CONFIG], now)

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Flip the node's Ready condition (a kubelet that stops or resumes posting status)."""
        with self._transaction() as state:
            now = self._now()
            for condition in self._node(state, name)["status"]["conditions"]:
                if condition["type"] == "Ready":
                    condition.update(
                        status="True" if ready else "Unknown",
                        reason="KubeletReady" if ready else "NodeStatusUnknown",
                        lastTransitionTime=_timestamp(now),
                    )

    def set_device_plugin_config(self, name: str, config: dict[str, Any]) -> None:
        """Add or replace the named entry of the device plugin ConfigMap.

        `config` is the parsed YAML (`nodes.sharing.device_plugin_config`); an invalid one raises
        ClusterError, as the plugin would crash-loop on it. Nodes pick it up only on restart.
        """
        try:
            validate_device_plugin_config(config)
        except InvalidSharingConfig as exc:
            raise ClusterError(f"device plugin config {name}: {exc}") from None
        with self._transaction() as state:
            configs = self._device_plugin_configs(state)
            configs[name] = config
            try:
                configmap = device_plugin_configmap(configs)
            except InvalidSharingConfig as exc:
                raise ClusterError(str(exc)) from None
            state["configmaps"][f"{GPU_OPERATOR_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP}"] = configmap

    def set_mig_config(self, name: str, config: list[dict[str, Any]]) -> None:
        """Add or replace the named mig-parted config the MIG manager can apply.

        Only the shape is checked here (ClusterError when malformed); a layout that does not fit
        a node's GPUs makes that node's `nvidia.com/mig.config.state` `failed` when applied.
        """
        with self._transaction() as state:
            configs = self._mig_configs(state, include_builtin=False)
            configs[name] = config
            try:
                configmap = mig_parted_configmap(configs, check_layouts=False)
            except InvalidSharingConfig as exc:
                raise ClusterError(str(exc)) from None
            state["configmaps"][f"{GPU_OPERATOR_NAMESPACE}/{MIG_PARTED_CONFIGMAP}"] = configmap

    def run_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        resources: dict[str, int],
        gpus: list[int] | None = None,
        share_milli: int | None = None,
        mig_start: int | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        ready: bool = True,
        owner_kind: str = "",
    ) -> None:
        """Add a pod someone else created, already bound to `node` and Running.

        It is Ready when `ready` (otherwise Running but not Ready until `set_pod_ready`). `gpus`,
        `share_milli` and `mig_start` become the gpuplane.io/gpus ("0,1"), share-milli and
        mig-start annotations. No capacity check: the pod is already there. Raises NotFound for
        an unknown node, ClusterError when the pod exists.
        """
        with self._transaction() as state:
            now = self._now()
            self._node(state, node)
            key = f"{namespace}/{name}"
            if key in state["pods"]:
                raise ClusterError(f'pods "{name}" already exists in namespace {namespace}')
            pod_annotations = dict(annotations or {})
            if gpus is not None:
                pod_annotations[ANNOTATION_ASSIGNED_GPUS] = ",".join(str(i) for i in gpus)
            if share_milli is not None:
                pod_annotations[ANNOTATION_SHARE_MILLI] = str(share_milli)
            if mig_start is not None:
                pod_annotations[ANNOTATION_MIG_START] = str(mig_start)
            metadata: dict[str, Any] = {
                "name": name,
                "namespace": namespace,
                "labels": dict(labels or {}),
                "annotations": pod_annotations,
                "creationTimestamp": _timestamp(now),
            }
            if owner_kind:
                metadata["ownerReferences"] = [
                    {"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner", "controller": True}
                ]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {"name": "main", "image": "unknown", "resources": {"limits": {k: str(v) for k, v in resources.items()}}}
                    ],
                },
                "status": {"phase": "Pending", "conditions": []},
            }
            self._add_pod(state, key, pod, deployment=None)
            _mark_running(pod, now, ready=ready)

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> None:
        """Make a Running pod pass or fail its readiness probe."""
        with self._transaction() as state:
            now = self._now()
            pod = state["pods"].get(f"{namespace}/{name}")
            if pod is None:
                raise NotFound(f'pods "{name}" not found in namespace {namespace}')
            if _phase(pod) != "Running":
                raise ClusterError(f"pod {namespace}/{name} is {_phase(pod)}, not Running")
            _set_condition(pod, "Ready", ready, now)
            _set_condition(pod, "ContainersReady", ready, now)

    def add_pdb(self, namespace: str, name: str, selector: dict[str, str], min_available: int) -> None:
        """Add or replace a policy/v1 PodDisruptionBudget with matchLabels `selector`."""
        with self._transaction() as state:
            state["pdbs"][f"{namespace}/{name}"] = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(selector)}},
            }

    def inject_fault(self, operation: str, message: str = "injected fault", times: int = 1) -> None:
        """Make the next `times` calls of the ClusterBackend method `operation` raise ClusterError(message).

        Faults live in the state file, so they reach other processes; several injections for one
        operation queue up in order.
        """
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r} (valid: {', '.join(sorted(OPERATIONS))})")
        if times < 1:
            raise ValueError(f"times must be >= 1, not {times}")
        with self._transaction() as state:
            state["faults"].setdefault(operation, []).append({"message": message, "remaining": times})

    def list_objects(self, kind: str) -> list[dict[str, Any]]:
        """Copies of the stored objects of a kind (Node, Pod, Deployment, PodDisruptionBudget, ConfigMap)."""
        collections = {
            "Node": "nodes",
            "Pod": "pods",
            "Deployment": "deployments",
            "PodDisruptionBudget": "pdbs",
            "ConfigMap": "configmaps",
        }
        if kind not in collections:
            raise ValueError(f"unknown kind {kind!r} (valid: {', '.join(collections)})")
        with self._transaction() as state:
            objects = state[collections[kind]]
            return [copy.deepcopy(objects[key]) for key in sorted(objects)]

    def events(self) -> list[dict[str, Any]]:
        """The latest simulator events (oldest first): MIG results, plugin restarts, evictions, failed pods."""
        with self._transaction() as state:
            return copy.deepcopy(state["events"])

    # --- state file -----------------------------------------------------------------------------

    def _now(self) -> float:
        if callable(self._clock):
            return float(self._clock())
        return float(self._clock.now)

    @contextmanager
    def _transaction(self) -> Iterator[dict[str, Any]]:
        """Lock, load and advance the state; save it on normal exit if it changed.

        An exception inside the block discards every change made in it.
        """
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                raw = self._read()
                state = json.loads(raw) if raw.strip() else _empty_state()
                if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
                    raise ClusterError(f"{self.state_path} is not a simulated cluster state file (version {STATE_VERSION})")
                self._advance(state, self._now())
                yield state
                self._advance(state, self._now())
                # Compact JSON: the C encoder only serves indent=None, and this runs on every call.
                text = json.dumps(state, separators=(",", ":"))
                if text != raw:
                    self._write(text)
            except json.JSONDecodeError as exc:
                raise ClusterError(f"{self.state_path} is corrupt: {exc}") from None
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> str:
        try:
            return self.state_path.read_text()
        except FileNotFoundError:
            return ""

    def _write(self, text: str) -> None:
        # Write a sibling temp file and rename it over the state: readers see the old or the new
        # state, never half of one. No fsync: the simulator needs process-crash safety only.
        fd, tmp = tempfile.mkstemp(dir=self.state_path.parent, prefix=f".{self.state_path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.replace(tmp, self.state_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _operate(self, operation: str, action: Callable[[dict[str, Any], float], T]) -> T:
        """Run a ClusterBackend operation in one transaction, unless a queued fault fires first."""
        fault: str | None = None
        result: T
        with self._transaction() as state:
            queue = state["faults"].get(operation) or []
            if queue:
                fault = queue[0]["message"]
                queue[0]["remaining"] -= 1
                if queue[0]["remaining"] <= 0:
                    queue.pop(0)
                if not queue:
                    state["faults"].pop(operation)
            else:
                result = action(state, self._now())
        # Raised after the transaction so that the consumed fault is saved.
        if fault is not None:
            raise ClusterError(fault)
        return result

    # --- simulation ----------------------------------------------------------------------------

    def _advance(self, state: dict[str, Any], now: float) -> None:
        """Bring the simulation to `now`: MIG manager, ReplicaSet controller, scheduler, kubelet."""
        for name, sim in sorted(state["sim"]["nodes"].items()):
            mig = sim.get("mig")
            if mig and mig["pending"] and now >= mig["since"] + self.mig_reconfigure_s:
                self._finish_mig(state, name, now)
        members = self._pods_by_deployment(state)
        for key in sorted(state["deployments"]):
            self._reconcile_deployment(state, key, members.get(key, []), now)
        unscheduled = [
            key
            for key, pod in state["pods"].items()
            if not pod["spec"].get("nodeName") and _phase(pod) == "Pending"
        ]
        if unscheduled:
            # Free resources are computed once per pass and debited on each bind.
            free_by_node = self._free_resources(state)
            # Free resources only shrink during a pass, so a pod asking what an earlier pod could
            # not get fails for the same reasons: remember the message per request shape.
            failed: dict[str, str] = {}
            for key in sorted(unscheduled, key=lambda k: state["sim"]["pods"][k]["seq"]):
                self._schedule(state, key, now, free_by_node, failed)
        for key, pod in state["pods"].items():
            bound_at = state["sim"]["pods"][key].get("bound_at")
            if _phase(pod) == "Pending" and bound_at is not None and now >= bound_at + self.pod_ready_delay_s:
                _mark_running(pod, now, ready=True)
        members = self._pods_by_deployment(state)
        for key, deployment in state["deployments"].items():
            pods = [state["pods"][k] for k in members.get(key, [])]
            ready = sum(1 for pod in pods if _is_ready(pod))
            deployment["status"] = {
                "observedGeneration": deployment["metadata"].get("generation", 1),
                "replicas": len(pods),
                "updatedReplicas": len(pods),
                "readyReplicas": ready,
                "availableReplicas": ready,
            }

    def _reconcile_deployment(self, state: dict[str, Any], key: str, pods: list[str], now: float) -> None:
        """The ReplicaSet controller: keep exactly spec.replicas pods (`pods`, its pod keys) of the Deployment."""
        deployment = state["deployments"][key]
        wanted = deployment["spec"]["replicas"]
        pods = list(pods)
        # Failed pods still count: the real controller would replace them, and a pod the device
        # plugin rejects would then be recreated and rejected forever.
        while len(pods) < wanted:
            pods.append(self._create_deployment_pod(state, key, now))
        if len(pods) > wanted:
            # Scale down the way the ReplicaSet controller ranks pods: unscheduled, then not
            # ready, then the newest first.
            def rank(pod_key: str) -> tuple[int, int, int]:
                pod = state["pods"][pod_key]
                return (
                    1 if pod["spec"].get("nodeName") else 0,
                    1 if _is_ready(pod) else 0,
                    -state["sim"]["pods"][pod_key]["seq"],
                )

            for pod_key in sorted(pods, key=rank)[: len(pods) - wanted]:
                self._delete_pod(state, pod_key)

    def _create_deployment_pod(self, state: dict[str, Any], key: str, now: float) -> str:
        deployment = state["deployments"][key]
        namespace, name = key.split("/", 1)
        template = deployment["spec"]["template"]
        template_hash = _hash_name(json.dumps(template, sort_keys=True), 10)
        replica_set = f"{name}-{template_hash}"
        state["counter"] += 1
        pod_name = f"{replica_set}-{_hash_name(key + '/' + str(state['counter']), 5)}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": {**template["metadata"].get("labels", {}), "pod-template-hash": template_hash},
                "annotations": dict(template["metadata"].get("annotations", {})),
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set, "controller": True}
                ],
                "creationTimestamp": _timestamp(now),
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending", "conditions": []},
        }
        pod_key = f"{namespace}/{pod_name}"
        self._add_pod(state, pod_key, pod, deployment=key)
        return pod_key

    def _schedule(
        self,
        state: dict[str, Any],
        key: str,
        now: float,
        free_by_node: dict[str, dict[str, int]],
        failed: dict[str, str],
    ) -> None:
        """The default scheduler for one pending pod: bind to the first node that fits, by name."""
        pod = state["pods"][key]
        requests = _extended_requests(pod)
        wanted_node = pinned_node({"spec": {"template": {"spec": pod["spec"]}}})
        shape = json.dumps([requests, wanted_node, pod["spec"].get("tolerations")], sort_keys=True)
        if shape in failed:
            _set_condition(pod, "PodScheduled", False, now, reason="Unschedulable", message=failed[shape])
            return
        reasons: Counter[str] = Counter()
        for name in sorted(state["nodes"]):
            reason = self._unfit_reason(state, name, pod, requests, wanted_node, free_by_node[name])
            if reason is None:
                self._bind(state, key, name, requests, now)
                for resource, amount in requests.items():
                    free_by_node[name][resource] = free_by_node[name].get(resource, 0) - amount
                return
            reasons[reason] += 1
        detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        message = f"0/{len(state['nodes'])} nodes are available" + (f": {detail}." if detail else ".")
        failed[shape] = message
        _set_condition(pod, "PodScheduled", False, now, reason="Unschedulable", message=message)

    def _unfit_reason(
        self,
        state: dict[str, Any],
        name: str,
        pod: dict[str, Any],
        requests: dict[str, int],
        wanted_node: str | None,
        free: dict[str, int],
    ) -> str | None:
        """Why `pod` cannot go to node `name` (the scheduler's reason text), or None when it fits.

        Only extended resources are counted: gpuplane workloads request GPUs, not CPU or memory.
        """
        node = state["nodes"][name]
        if wanted_node is not None and name != wanted_node:
            return "node(s) didn't match Pod's node affinity/selector"
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]):
            return "node(s) were not ready"
        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        tolerations = pod["spec"].get("tolerations") or []
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
                if taint["key"] == _UNSCHEDULABLE_TAINT:
                    continue  # reported as "unschedulable" above
                return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        for resource, amount in sorted(requests.items()):
            if amount > free.get(resource, 0):
                return f"Insufficient {resource}"
        return None

    def _free_resources(self, state: dict[str, Any]) -> dict[str, dict[str, int]]:
        """Per node: allocatable extended resources minus what its bound, live pods request."""
        free_by_node = {
            name: {key: int(parse_quantity(value)) for key, value in node["status"]["allocatable"].items() if "/" in key}
            for name, node in state["nodes"].items()
        }
        for pod in state["pods"].values():
            free = free_by_node.get(pod["spec"].get("nodeName") or "")
            if free is not None and _phase(pod) not in _TERMINAL_PHASES:
                for resource, amount in _extended_requests(pod).items():
                    free[resource] = free.get(resource, 0) - amount
        return free_by_node

    def _bind(self, state: dict[str, Any], key: str, node_name: str, requests: dict[str, int], now: float) -> None:
        pod = state["pods"][key]
        pod["spec"]["nodeName"] = node_name
        state["sim"]["pods"][key]["bound_at"] = now
        _set_condition(pod, "PodScheduled", True, now)
        plugin = state["sim"]["nodes"][node_name]["plugin"]
        if plugin["strategy"] != "none" and requests.get(RESOURCE_GPU, 0) > 1:
            # The device plugin refuses to allocate several replicas of a shared GPU to one pod
            # (failRequestsGreaterThanOne): kubelet admission fails the pod.
            pod["status"]["phase"] = "Failed"
            pod["status"]["reason"] = "UnexpectedAdmissionError"
            pod["status"]["message"] = (
                f"Allocate failed due to request for '{RESOURCE_GPU}: {requests[RESOURCE_GPU]}' too large: "
                f"maximum request size for shared resources is 1"
            )
            self._event(state, now, "Pod", key, "Warning", "UnexpectedAdmissionError", pod["status"]["message"])

    def _check_budget(self, state: dict[str, Any], pdb: dict[str, Any], pod: dict[str, Any]) -> None:
        namespace = pdb["metadata"]["namespace"]
        healthy = sum(
            1
            for key, other in state["pods"].items()
            if key.startswith(f"{namespace}/") and _selector_matches(pdb, other) and _is_ready(other)
        )
        min_available = pdb["spec"]["minAvailable"]
        # IfHealthyBudget (the default policy): a ready pod needs a spare healthy pod; a running
        # but unready one may go while the budget is met.
        remaining = healthy - 1 if _is_ready(pod) else healthy
        if remaining < min_available:
            raise EvictionBlocked(EVICTION_BLOCKED_MESSAGE)

    # --- device plugin and MIG manager ---------------------------------------------------------------

    def _apply_device_plugin_config(self, state: dict[str, Any], node: str, now: float) -> None:
        """Restart the device plugin pod of `node` with the config its label names."""
        obj = state["nodes"][node]
        sim = state["sim"]["nodes"][node]
        config_name = obj["metadata"]["labels"].get(LABEL_DEVICE_PLUGIN_CONFIG)
        if config_name:
            configs = self._device_plugin_configs(state)
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
        if spec.strategy == "mps":
            layout = _decode_layout(obj)
            if layout:
                raise ClusterError(
                    f"device plugin on {node}: MPS shares only full GPUs, and GPU "
                    f"{', '.join(str(i) for i in sorted(layout))} has MIG enabled"
                )
            model = _catalog_model(sim["base_product"])
            if model is not None:
                try:
                    check_mps_client_limit(spec.replicas, model.compute_capability)
                except InvalidSharingConfig as exc:
                    raise ClusterError(f"device plugin on {node}: {exc}") from None
        sim["plugin"] = _spec_dict(config_name, spec)
        for key, pod in list(state["pods"].items()):
            if pod["spec"].get("nodeName") == node and _owner_name(pod) == DEVICE_PLUGIN_DAEMONSET:
                self._delete_pod(state, key)
        state["counter"] += 1
        pod_name = f"{DEVICE_PLUGIN_DAEMONSET}-{_hash_name(node + '/' + str(state['counter']), 5)}"
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
                "creationTimestamp": _timestamp(now),
            },
            "spec": {"nodeName": node, "containers": [{"name": "nvidia-device-plugin", "image": DEVICE_PLUGIN_IMAGE}]},
            "status": {"phase": "Pending", "conditions": []},
        }
        self._add_pod(state, f"{GPU_OPERATOR_NAMESPACE}/{pod_name}", plugin_pod, deployment=None)
        _mark_running(plugin_pod, now, ready=True)
        self._publish_node_resources(state, node)
        self._event(
            state, now, "Node", node, "Normal", "DevicePluginRestarted",
            f"device plugin config {config_name or '(default)'}: {spec.strategy}, {spec.replicas} replicas, "
            f"migStrategy {spec.mig_strategy}",
        )

    def _start_mig(self, state: dict[str, Any], node: str, config_name: str, now: float) -> None:
        state["nodes"][node]["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "pending"
        state["sim"]["nodes"][node]["mig"] = {"config": config_name, "since": now, "pending": True}

    def _finish_mig(self, state: dict[str, Any], node: str, now: float) -> None:
        """The MIG manager applies the pending mig-parted config: `success` with a new layout, or `failed`."""
        obj = state["nodes"][node]
        sim = state["sim"]["nodes"][node]
        mig = sim["mig"]
        mig["pending"] = False
        try:
            layout = self._planned_layout(state, node, mig["config"])
        except (InvalidMIGLayout, UnknownGPUProduct, ClusterError) as exc:
            obj["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "failed"
            mig["error"] = str(exc)
            self._event(state, now, "Node", node, "Warning", "MIGConfigFailed", f"{mig['config']}: {exc}")
            return
        mig.pop("error", None)
        annotations = obj["metadata"].setdefault("annotations", {})
        if layout:
            annotations[ANNOTATION_MIG_LAYOUT] = json.dumps({str(i): layout[i] for i in sorted(layout)})
        else:
            annotations.pop(ANNOTATION_MIG_LAYOUT, None)
        obj["metadata"]["labels"][LABEL_MIG_CONFIG_STATE] = "success"
        # The MIG manager restarts the device plugin and GFD after reconfiguring, with the
        # config they already run.
        self._publish_node_resources(state, node)
        self._event(state, now, "Node", node, "Normal", "MIGConfigApplied", f"{mig['config']} applied")

    def _planned_layout(self, state: dict[str, Any], node: str, config_name: str) -> dict[int, list[list[Any]]]:
        """The node's MIG layout after applying `config_name`: {gpu index: [[profile, start, size, uuid]]}."""
        configs = self._mig_configs(state, include_builtin=True)
        if config_name not in configs:
            raise ClusterError(f"mig-parted config {config_name!r} not found (known: {', '.join(sorted(configs))})")
        obj = state["nodes"][node]
        product = state["sim"]["nodes"][node]["base_product"]
        gpu_count = int(obj["metadata"]["labels"][LABEL_GPU_COUNT])
        model: GPUModel | None = None
        layout = {index: devices for index, devices in _decode_layout(obj).items()}
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

    def _publish_node_resources(self, state: dict[str, Any], node: str) -> None:
        """What GFD and the device plugin advertise for the node's running plugin config and MIG layout."""
        obj = state["nodes"][node]
        sim = state["sim"]["nodes"][node]
        plugin = sim["plugin"]
        labels = obj["metadata"]["labels"]
        gpu_count = int(labels[LABEL_GPU_COUNT])
        replicas = plugin["replicas"]
        layout = _decode_layout(obj)

        shared = plugin["strategy"] != "none"
        # renameByDefault=false: GFD marks the product of a replicated GPU with "-SHARED".
        labels[LABEL_GPU_PRODUCT] = sim["base_product"] + ("-SHARED" if shared else "")
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
            resources = {k: v for k, v in obj["status"][field].items() if not k.startswith("nvidia.com/")}
            resources.update({k: str(v) for k, v in extended.items()})
            obj["status"][field] = resources

    # --- lookups ----------------------------------------------------------------------------------

    def _node(self, state: dict[str, Any], name: str) -> dict[str, Any]:
        node = state["nodes"].get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found')
        return node

    def _deployment(self, state: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
        deployment = state["deployments"].get(f"{namespace}/{name}")
        if deployment is None:
            raise NotFound(f'deployments.apps "{name}" not found in namespace {namespace}')
        return deployment

    def _deployment_pods(self, state: dict[str, Any], key: str) -> list[str]:
        return self._pods_by_deployment(state).get(key, [])

    def _pods_by_deployment(self, state: dict[str, Any]) -> dict[str, list[str]]:
        members: dict[str, list[str]] = {}
        for pod_key, sim in state["sim"]["pods"].items():
            if sim.get("deployment"):
                members.setdefault(sim["deployment"], []).append(pod_key)
        return members

    def _device_plugin_configs(self, state: dict[str, Any]) -> dict[str, Any]:
        configmap = state["configmaps"].get(f"{GPU_OPERATOR_NAMESPACE}/{DEVICE_PLUGIN_CONFIGMAP}")
        data = (configmap or {}).get("data") or {}
        return {key: yaml.safe_load(text) for key, text in data.items()}

    def _mig_configs(self, state: dict[str, Any], *, include_builtin: bool) -> dict[str, list[dict[str, Any]]]:
        configs: dict[str, list[dict[str, Any]]] = copy.deepcopy(BUILTIN_MIG_CONFIGS) if include_builtin else {}
        configmap = state["configmaps"].get(f"{GPU_OPERATOR_NAMESPACE}/{MIG_PARTED_CONFIGMAP}")
        text = ((configmap or {}).get("data") or {}).get(MIG_PARTED_CONFIGMAP_KEY)
        if text:
            parsed = yaml.safe_load(text)
            validate_mig_parted_config(parsed, check_layouts=False)
            configs.update(parsed["mig-configs"])
        return configs

    def _add_pod(self, state: dict[str, Any], key: str, pod: dict[str, Any], *, deployment: str | None) -> None:
        state["counter"] += 1
        state["pods"][key] = pod
        state["sim"]["pods"][key] = {"seq": state["counter"], "deployment": deployment, "bound_at": None}

    def _delete_pod(self, state: dict[str, Any], key: str) -> None:
        state["pods"].pop(key, None)
        state["sim"]["pods"].pop(key, None)

    def _event(
        self, state: dict[str, Any], now: float, kind: str, name: str, type_: str, reason: str, message: str
    ) -> None:
        state["events"].append(
            {"time": _timestamp(now), "kind": kind, "name": name, "type": type_, "reason": reason, "message": message}
        )
        del state["events"][:-_MAX_EVENTS]


# --- helpers ---------------------------------------------------------------------------------------


def _empty_state() -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "counter": 0,
        "nodes": {},
        "pods": {},
        "deployments": {},
        "pdbs": {},
        "configmaps": {},
        "faults": {},
        "events": [],
        # Simulator bookkeeping a real API server would not show: the running plugin config,
        # MIG manager progress, pod bind times and controllers.
        "sim": {"nodes": {}, "pods": {}},
    }


def _default_spec() -> SharingSpec:
    return SharingSpec(strategy="none", replicas=1, mig_strategy=DEFAULT_MIG_STRATEGY)  # type: ignore[arg-type]


def _spec_dict(config_name: str | None, spec: SharingSpec) -> dict[str, Any]:
    return {"config": config_name, "strategy": spec.strategy, "replicas": spec.replicas, "mig_strategy": spec.mig_strategy}


def _catalog_model(product: str) -> GPUModel | None:
    try:
        return lookup_product(product)
    except UnknownGPUProduct:
        return None


def _decode_layout(node: dict[str, Any]) -> dict[int, list[list[Any]]]:
    raw = (node["metadata"].get("annotations") or {}).get(ANNOTATION_MIG_LAYOUT)
    return {int(index): devices for index, devices in json.loads(raw).items()} if raw else {}


def _timestamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hash_name(seed: str, length: int) -> str:
    """A deterministic name suffix in Kubernetes' alphabet."""
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(_NAME_ALPHABET))
        chars.append(_NAME_ALPHABET[digit])
    return "".join(chars)


def _phase(pod: dict[str, Any]) -> str:
    return pod.get("status", {}).get("phase", "Pending")


def _is_ready(pod: dict[str, Any]) -> bool:
    return _phase(pod) == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def _owner_kind(pod: dict[str, Any]) -> str:
    owners = pod["metadata"].get("ownerReferences") or []
    return owners[0].get("kind", "") if owners else ""


def _owner_name(pod: dict[str, Any]) -> str:
    owners = pod["metadata"].get("ownerReferences") or []
    return owners[0].get("name", "") if owners else ""


def _extended_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Extended resources (names with a "/") the pod asks for; limits win over requests."""
    totals: Counter[str] = Counter()
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        for key, value in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
            if "/" in key:
                totals[key] += int(parse_quantity(value))
    return {key: value for key, value in totals.items() if value > 0}


def _selector_matches(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    # policy/v1: an empty selector selects every pod of the namespace.
    match_labels = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in match_labels.items())


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint["key"]:
                return True
        elif toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _set_condition(
    pod: dict[str, Any], kind: str, status: bool, now: float, *, reason: str = "", message: str = ""
) -> None:
    conditions = pod["status"].setdefault("conditions", [])
    condition = next((c for c in conditions if c["type"] == kind), None)
    value = "True" if status else "False"
    if condition is None:
        condition = {"type": kind, "status": value, "lastTransitionTime": _timestamp(now)}
        conditions.append(condition)
    elif condition["status"] != value:
        condition.update(status=value, lastTransitionTime=_timestamp(now))
    for field, text in (("reason", reason), ("message", message)):
        if text:
            condition[field] = text
        else:
            condition.pop(field, None)


def _mark_running(pod: dict[str, Any], now: float, *, ready: bool) -> None:
    """Kubelet started the containers: Running, Ready as its probe says."""
    pod["status"]["phase"] = "Running"
    pod["status"]["startTime"] = _timestamp(now)
    for kind in ("PodScheduled", "Initialized"):
        _set_condition(pod, kind, True, now)
    _set_condition(pod, "ContainersReady", ready, now)
    _set_condition(pod, "Ready", ready, now)
