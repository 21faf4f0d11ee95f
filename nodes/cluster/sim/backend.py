"""SimulatedCluster: the ClusterBackend over the simulated cluster, and the controls to seed and break it.

A thin facade: each method opens one transaction on the state file (`store`), lets the simulation
catch up with the clock and hands the state to the module that owns the behaviour. Time is lazy:
every call first advances the simulation to the clock's now (MIG manager, ReplicaSet controller,
scheduler, kubelet), so a fake clock makes tests deterministic; each method first consumes a queued fault.
"""
from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from nodes.cluster.base import (
    Changes,
    ClusterError,
    ClusterNode,
    ClusterPod,
    Listing,
    NotFound,
    WorkloadSpec,
)
from nodes.cluster.parsing import parse_node, parse_pod
from nodes.cluster.sim import (
    device_plugin,
    eviction,
    faults,
    fixtures,
    mig_manager,
    replica_sets,
    scheduling,
    versions,
    workloads,
)
from nodes.cluster.sim.configmaps import ConfigMapAPI
from nodes.cluster.sim.eviction import PodDisruptionBudgetAPI
from nodes.cluster.sim.objects import REMOVED_DELETED, find_node, remove_pod
from nodes.cluster.sim.priority_classes import PriorityClassAPI
from nodes.cluster.sim.service_accounts import ServiceAccountAPI
from nodes.cluster.sim.store import State, StateFile
from nodes.cluster.watch_events import node_changes, pod_changes
from nodes.contract import LABEL_MIG_CONFIG

T = TypeVar("T")

# How long a restarted device plugin pod takes to register its devices again: a few seconds, as
# the real DaemonSet pod needs to start, read its config and talk to the kubelet.
DEFAULT_PLUGIN_RESTART_S = 3.0

# list_objects kinds -> their collection in the state.
_COLLECTIONS = {
    "Node": "nodes",
    "Pod": "pods",
    "Deployment": "deployments",
    "PodDisruptionBudget": "pdbs",
    "ConfigMap": "configmaps",
}


class SimulatedCluster(ConfigMapAPI, ServiceAccountAPI, PriorityClassAPI, PodDisruptionBudgetAPI):
    """A ClusterBackend over a state file (`store`); see `nodes.cluster.sim` for what it simulates.

    `clock` is a callable returning seconds (like `time.time`) or an object with a numeric `now`
    attribute. Pods become Ready `pod_ready_delay_s` after binding; a MIG reconfiguration
    finishes `mig_reconfigure_s` after its label changed; a device plugin pod is ready (and the
    node's allocatable and GFD labels show its config) `plugin_restart_s` after a restart, or
    after the MIG manager is done. 0 makes either instant. The last two are deadlines written into
    the state when the change starts, so processes with other settings honour them as well.
    """

    def __init__(
        self,
        state_path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] | Any = time.time,
        pod_ready_delay_s: float = 2.0,
        mig_reconfigure_s: float = 5.0,
        plugin_restart_s: float = DEFAULT_PLUGIN_RESTART_S,
    ) -> None:
        self.state_file = StateFile(state_path)
        self._clock = clock
        self.pod_ready_delay_s = pod_ready_delay_s
        self.mig_reconfigure_s = mig_reconfigure_s
        self.plugin_restart_s = plugin_restart_s

    # --- ClusterBackend ------------------------------------------------------------------------

    @property
    def cluster_key(self) -> str:  # which cluster an inventory's resourceVersions belong to
        return f"sim:{self.state_file.path.resolve()}"

    def list_nodes(self) -> list[ClusterNode]:
        """Every node, by name, parsed as a real cluster's Node JSON is."""
        return self.list_nodes_versioned().items

    def list_nodes_versioned(self) -> Listing[ClusterNode]:
        return self._operate("list_nodes", lambda s, now: Listing(
            [parse_node(s["nodes"].peek(n)) for n in sorted(s["nodes"])], versions.list_version(s)))

    def list_gpu_pods(self) -> list[ClusterPod]:
        """Pods (all namespaces) that request an nvidia.com/gpu or nvidia.com/mig-* resource."""
        return self.list_gpu_pods_versioned().items

    def list_gpu_pods_versioned(self) -> Listing[ClusterPod]:
        return self._operate("list_gpu_pods", lambda s, now: Listing(
            [pod for pod in (parse_pod(s["pods"].peek(k)) for k in sorted(s["pods"])) if pod is not None],
            versions.list_version(s)))

    # A watch answers at once with what the store has (`versions.watch`); reading nodes or pods,
    # by list or watch, is one operation for injected faults, as one API server serves both.
    def watch_nodes(self, resource_version: str, timeout_s: float) -> Changes[ClusterNode]:
        return self._operate("list_nodes", lambda s, now: node_changes(
            versions.watch(self.state_file, s, "Node", resource_version), resource_version, "watch nodes"))

    def watch_gpu_pods(self, resource_version: str, timeout_s: float) -> Changes[ClusterPod]:
        return self._operate("list_gpu_pods", lambda s, now: pod_changes(
            versions.watch(self.state_file, s, "Pod", resource_version), resource_version, "watch pods"))

    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Merge labels; a None value removes the label.

        A changed `nvidia.com/mig.config` starts the MIG manager (state `pending`, the device
        plugin paused); a changed `nvidia.com/device-plugin.config` does nothing until
        `restart_device_plugin`.
        """

        def action(state: State, now: float) -> None:
            current = find_node(state, node)["metadata"].setdefault("labels", {})
            old_mig_config = current.get(LABEL_MIG_CONFIG)
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = str(value)
            new_mig_config = current.get(LABEL_MIG_CONFIG)
            # The MIG manager reacts to label changes only, as the real one (a watch) does.
            if new_mig_config is not None and new_mig_config != old_mig_config:
                mig_manager.start_reconfiguration(
                    state, node, new_mig_config, now, reconfigure_s=self.mig_reconfigure_s,
                    plugin_restart_s=self.plugin_restart_s,
                )

        self._operate("set_node_labels", action)

    def cordon(self, node: str) -> None:
        """Mark the node unschedulable (and, as the node lifecycle controller does, taint it)."""
        self._operate("cordon", lambda state, now: scheduling.cordon(state, node, now))

    def uncordon(self, node: str) -> None:
        """Make the node schedulable again and remove the unschedulable taint."""
        self._operate("uncordon", lambda state, now: scheduling.uncordon(state, node))

    def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the simulated Eviction API.

        Raises NotFound for an unknown pod, ClusterError for a DaemonSet pod (drains leave them
        alone) or a pod matched by several PodDisruptionBudgets, and EvictionBlocked (HTTP 429)
        when evicting would leave fewer healthy pods than a budget's minAvailable. Pending,
        Succeeded and Failed pods ignore budgets, as in Kubernetes. An evicted Deployment pod is
        recreated by its ReplicaSet under a new name.
        """
        self._operate("evict_pod", lambda state, now: eviction.evict_pod(state, namespace, name, now))

    def create_workload(self, spec: WorkloadSpec) -> None:
        """Store the Deployment and create its pods; like `kubectl apply`, an existing one is updated.

        A changed pod template replaces all pods of the Deployment (the Recreate strategy).
        """
        self._operate("create_workload", lambda state, now: workloads.apply_deployment(state, spec, now))

    def scale_workload(self, namespace: str, name: str, replicas: int) -> None:
        """Set the Deployment's replicas; NotFound when there is none, ClusterError when replicas < 0."""
        self._operate(
            "scale_workload", lambda state, now: workloads.scale_deployment(state, namespace, name, replicas)
        )

    def delete_workload(self, namespace: str, name: str) -> None:
        """Delete the Deployment and its pods; NotFound when there is none."""
        self._operate(
            "delete_workload", lambda state, now: workloads.delete_deployment(state, namespace, name, now)
        )

    def workload_ready(self, namespace: str, name: str) -> bool:
        """True when as many pods of the Deployment are Ready as it has replicas."""
        return self._operate("workload_ready", lambda state, now: workloads.deployment_ready(state, namespace, name))

    def restart_device_plugin(self, node: str) -> None:
        """Delete the node's device plugin pod; its replacement reads the node's config label.

        The config named by `nvidia.com/device-plugin.config` (the operator default when the
        label is absent) then drives the GFD labels and allocatable `nvidia.com/gpu`, from
        `plugin_restart_s` on: until then the node has no allocatable GPUs and its old labels. An
        unknown or invalid config, or one the node's GPUs cannot run, raises ClusterError and
        changes nothing, as a crash-looping plugin would leave the advertised resources alone.
        """

        def action(state: State, now: float) -> None:
            find_node(state, node)
            device_plugin.restart_device_plugin(state, node, now, delay_s=self.plugin_restart_s)

        self._operate("restart_device_plugin", action)

    # --- seeding and simulation control ---------------------------------------------------------

    def reset(self) -> None:
        """Empty the cluster: no nodes, pods, workloads, budgets, configs or faults."""
        with self._transaction() as state:
            state.clear_all()

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
        """Add a Ready GPU node as GFD and the device plugin would publish it (`fixtures.add_gpu_node`).
        ClusterError when the node exists (or a config label names a config the plugin cannot run),
        ValueError when `gpu_count` < 1."""
        if gpu_count < 1:
            raise ValueError(f"a GPU node has at least one GPU, not {gpu_count}")
        with self._transaction() as state:
            fixtures.add_gpu_node(
                state, self._now(), name, product=product, gpu_count=gpu_count, gpu_memory_mib=gpu_memory_mib,
                cpu_milli=cpu_milli, memory_mib=memory_mib, labels=labels, taints=taints,
                mig_reconfigure_s=self.mig_reconfigure_s, plugin_restart_s=self.plugin_restart_s,
            )

    def add_gpu_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Add many GPU nodes in one transaction, all or none: `add_gpu_node`'s keyword arguments per
        node (with `name`)."""
        for node in nodes:
            if node["gpu_count"] < 1:
                raise ValueError(f"a GPU node has at least one GPU, not {node['gpu_count']}")
        with self._transaction() as state:
            now = self._now()
            for node in nodes:
                fixtures.add_gpu_node(
                    state, now, node["name"], product=node["product"], gpu_count=node["gpu_count"],
                    gpu_memory_mib=node["gpu_memory_mib"], cpu_milli=node.get("cpu_milli", 64000),
                    memory_mib=node.get("memory_mib", 524288), labels=node.get("labels"), taints=node.get("taints"),
                    mig_reconfigure_s=self.mig_reconfigure_s, plugin_restart_s=self.plugin_restart_s,
                )

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Flip the node's Ready condition (a kubelet that stops or resumes posting status)."""
        with self._transaction() as state:
            fixtures.set_node_ready(state, self._now(), name, ready)

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
        """Add a pod someone else created, already bound to `node` and Running (`fixtures.run_pod`).

        With `owner_kind="ReplicaSet"` its ReplicaSet recreates it, under a new name and unbound,
        when it is evicted or deleted (`replica_sets`). It is Ready when `ready` (otherwise Running but not Ready until `set_pod_ready`). Raises
        NotFound for an unknown node, ClusterError when the pod exists.
        """
        with self._transaction() as state:
            fixtures.run_pod(
                state, self._now(), namespace, name, node, resources=resources, gpus=gpus,
                share_milli=share_milli, mig_start=mig_start, labels=labels, annotations=annotations,
                ready=ready, owner_kind=owner_kind,
            )

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> None:
        """Make a Running pod pass or fail its readiness probe."""
        with self._transaction() as state:
            fixtures.set_pod_ready(state, self._now(), namespace, name, ready)

    def inject_fault(self, operation: str, message: str = "injected fault", times: int = 1) -> None:
        """Make the next `times` calls of the ClusterBackend method `operation` raise ClusterError(message).
        Faults live in the state file, so they reach other processes; injections for one operation
        queue up in order. ValueError for an unknown operation or `times` < 1."""
        faults.check_fault(operation, times)
        with self._transaction() as state:
            faults.queue_fault(state, operation, message, times)

    def inject_mig_failure(self, config_name: str, message: str = "injected MIG manager failure", times: int = 1) -> None:
        """Make the MIG manager's next `times` applications of the mig-parted config `config_name`
        (on any node) report `nvidia.com/mig.config.state=failed` with `message`, keeping the
        previous layout, as when mig-parted cannot reset a GPU that is in use. ValueError when `times` < 1."""
        if times < 1:
            raise ValueError(f"times must be >= 1, not {times}")
        with self._transaction() as state:
            faults.queue_fault(state, faults.mig_fault_key(config_name), message, times)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod directly (`kubectl delete pod`), not through the Eviction API: no budget is
        asked, and the event record says `Deleted`. A Deployment's pod comes back under a new name.
        NotFound for an unknown pod."""
        with self._transaction() as state:
            if f"{namespace}/{name}" not in state["pods"]:
                raise NotFound(f'pods "{name}" not found in namespace {namespace}')
            remove_pod(state, self._now(), f"{namespace}/{name}", REMOVED_DELETED, "deleted directly")

    def list_objects(self, kind: str) -> list[dict[str, Any]]:
        """Copies of the stored objects of a kind (Node, Pod, Deployment, PodDisruptionBudget, ConfigMap)."""
        if kind not in _COLLECTIONS:
            raise ValueError(f"unknown kind {kind!r} (valid: {', '.join(_COLLECTIONS)})")
        with self._transaction() as state:
            objects = state[_COLLECTIONS[kind]]
            return [copy.deepcopy(objects.peek(key)) for key in sorted(objects)]

    def events(self) -> list[dict[str, Any]]:
        """The latest simulator events (oldest first, at most `objects.MAX_EVENTS`): MIG results, plugin
        restarts, failed pods, and every pod that left, its reason saying how (`objects.REMOVAL_REASONS`)
        and its `ready` field whether it was Ready then."""
        with self._transaction() as state:
            return copy.deepcopy(dict.__getitem__(state, "events"))

    # --- simulation ----------------------------------------------------------------------------

    def _now(self) -> float:
        if callable(self._clock):
            return float(self._clock())
        return float(self._clock.now)

    @contextmanager
    def _transaction(self) -> Iterator[State]:
        """The state, advanced to now, under the file lock; saved on normal exit (`StateFile.transaction`)."""
        with self.state_file.transaction(lambda state: self._advance(state, self._now())) as state:
            yield state

    def _operate(self, operation: str, action: Callable[[State, float], T]) -> T:
        """Run a ClusterBackend operation in one transaction, unless a queued fault fires first."""
        fault: str | None = None
        result: T
        with self._transaction() as state:
            fault = faults.take_fault(state, operation)
            if fault is None:
                result = action(state, self._now())
        # Raised after the transaction so that the consumed fault is saved.
        if fault is not None:
            raise ClusterError(fault)
        return result

    def _advance(self, state: State, now: float) -> None:
        """Bring the simulation to `now`: MIG manager, device plugin restarts, ReplicaSet controller,
        scheduler, kubelet."""
        mig_manager.finish_reconfigurations(state, now, self.mig_reconfigure_s)
        device_plugin.finish_restarts(state, now)
        workloads.reconcile_deployments(state, now)
        replica_sets.reconcile_replica_sets(state, now)
        scheduling.schedule_pending(state, now)
        scheduling.start_bound_pods(state, now, self.pod_ready_delay_s)
        workloads.update_deployment_status(state)
