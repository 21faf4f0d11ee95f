"""KubernetesCluster: the ClusterBackend for a real cluster, on the official `kubernetes` client.

This is the only module in gpuplane that imports `kubernetes` (a test enforces it): the rest of
the code base speaks the plain types of `nodes.cluster.base`, the simulated cluster's too.

Reads and watches take the raw JSON (`_preload_content=False`, a watch event's `raw_object`) to
`nodes.cluster.parsing` and `watch_events`, which the simulated cluster uses too, so both backends
interpret labels and quantities identically. Every API or transport failure leaves as a
`ClusterError` (`NotFound`, `EvictionBlocked`, `ResourceVersionGone`...) naming the operation, the
HTTP status, the API's reason and message (`nodes.cluster.api_errors` writes it).
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch

from nodes.cluster.api_errors import Conflict, api_error, transport_reason
from nodes.cluster.base import (
    Changes,
    ClusterError,
    ClusterNode,
    ClusterPod,
    Listing,
    NotFound,
    WorkloadSpec,
)
from nodes.cluster.kubernetes_configmaps import ConfigMapCalls
from nodes.cluster.kubernetes_http import FIELD_MANAGER, MERGE_PATCH, STRATEGIC_MERGE_PATCH, json_content
from nodes.cluster.kubernetes_pdbs import PDBCalls
from nodes.cluster.kubernetes_priorityclasses import PriorityClassCalls
from nodes.cluster.kubernetes_tokenreview import TokenReviewCalls
from nodes.cluster.manifests import deployment_manifest
from nodes.cluster.parsing import parse_node, parse_pod
from nodes.cluster.watch_events import node_changes, pod_changes

# Where and how the NVIDIA GPU operator runs its device plugin DaemonSet.
DEFAULT_DEVICE_PLUGIN_NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_SELECTOR = "app=nvidia-device-plugin-daemonset"

# Pods in these phases hold no resources any more; the API server filters them out for us.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"

# kubectl's page size: large enough for few round trips, small enough to keep responses bounded.
DEFAULT_PAGE_SIZE = 500
# (connect, read) seconds. Without a timeout a hung API server would hang a Celery task forever.
DEFAULT_REQUEST_TIMEOUT_S = (5.0, 30.0)

_T = TypeVar("_T")


class KubernetesCluster(ConfigMapCalls, PDBCalls, TokenReviewCalls, PriorityClassCalls):
    """ClusterBackend for a real Kubernetes cluster, reached through `api_client`.

    `device_plugin_namespace` is where the NVIDIA device plugin pods run (the GPU operator's
    namespace); `page_size` bounds each list request; `request_timeout_s` is (connect, read).
    ConfigMaps, PodDisruptionBudgets and TokenReviews are the mixins' (`kubernetes_configmaps`,
    `kubernetes_pdbs`, `kubernetes_tokenreview`)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        device_plugin_namespace: str = DEFAULT_DEVICE_PLUGIN_NAMESPACE,
        page_size: int = DEFAULT_PAGE_SIZE,
        request_timeout_s: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.api_client = api_client
        self.core: client.CoreV1Api = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.authentication = client.AuthenticationV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)  # PriorityClasses (kubernetes_priorityclasses)
        self.device_plugin_namespace = device_plugin_namespace
        self.page_size = page_size
        self.request_timeout_s = request_timeout_s

    # --- construction ---------------------------------------------------------------------
    @classmethod
    def from_settings(cls) -> KubernetesCluster:
        """A cluster configured from Django settings.

        `GPUPLANE_KUBECONFIG` set: that kubeconfig file (its current context). Otherwise the
        in-cluster service account when running in a pod, else the default kubeconfig
        ($KUBECONFIG or ~/.kube/config). `GPUPLANE_DEVICE_PLUGIN_NAMESPACE`, when defined,
        overrides "gpu-operator". Raises ClusterError saying what was tried when nothing loads.
        """
        from django.conf import settings

        namespace = getattr(settings, "GPUPLANE_DEVICE_PLUGIN_NAMESPACE", "") or DEFAULT_DEVICE_PLUGIN_NAMESPACE
        kubeconfig = settings.GPUPLANE_KUBECONFIG
        if kubeconfig:
            return cls(_client_from_kubeconfig(kubeconfig), device_plugin_namespace=namespace)
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as in_cluster_error:
            default_path = os.environ.get("KUBECONFIG") or config.KUBE_CONFIG_DEFAULT_LOCATION
            try:
                api_client = _client_from_kubeconfig(default_path)
            except ClusterError as kubeconfig_error:
                raise ClusterError(
                    "cannot configure the Kubernetes client: not running in a cluster "
                    f"({in_cluster_error}) and {kubeconfig_error}; set GPUPLANE_KUBECONFIG"
                ) from None
            return cls(api_client, device_plugin_namespace=namespace)
        return cls(client.ApiClient(configuration), device_plugin_namespace=namespace)

    @classmethod
    def for_host(cls, url: str, token: str | None = None, **kwargs: Any) -> KubernetesCluster:
        """A cluster at `url` (e.g. "https://10.0.0.1:6443"), authenticated with a bearer `token` if
        given; extra keyword arguments go to the constructor."""
        configuration = client.Configuration(host=url.rstrip("/"))
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return cls(client.ApiClient(configuration), **kwargs)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    # --- reads ----------------------------------------------------------------------------
    @property
    def cluster_key(self) -> str:
        return f"kubernetes:{self.host}"

    def list_nodes(self) -> list[ClusterNode]:
        """All nodes, parsed by `parsing.parse_node` (GFD labels, allocatable, conditions, taints)."""
        return self.list_nodes_versioned().items

    def list_nodes_versioned(self) -> Listing[ClusterNode]:
        raw, version = self._list("list nodes", self.core.list_node)
        return Listing([parse_node(obj) for obj in raw], version)

    def list_gpu_pods(self) -> list[ClusterPod]:
        """Pods of all namespaces that are not finished and request an NVIDIA GPU or MIG resource."""
        return self.list_gpu_pods_versioned().items

    def list_gpu_pods_versioned(self) -> Listing[ClusterPod]:
        raw, version = self._list("list pods", self.core.list_pod_for_all_namespaces, field_selector=ACTIVE_PODS)
        return Listing([pod for pod in map(parse_pod, raw) if pod is not None], version)

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Changes[ClusterNode]:
        """Node events after `resource_version` for up to `timeout_s` (then the API server ends the watch)."""
        return node_changes(self._watch("watch nodes", self.core.list_node, resource_version, timeout_s),
                            resource_version, "watch nodes")

    def watch_gpu_pods(self, resource_version: str, timeout_s: float) -> Changes[ClusterPod]:
        """As `watch_nodes`; a pod that finishes leaves the field selector, which the API reports as DELETED."""
        raw = self._watch("watch pods", self.core.list_pod_for_all_namespaces, resource_version, timeout_s,
                          field_selector=ACTIVE_PODS)
        return pod_changes(raw, resource_version, "watch pods")

    def workload_ready(self, namespace: str, name: str) -> bool:
        """True when the Deployment's controller has seen its latest spec and all desired replicas are Ready.

        Without the observedGeneration check a Deployment read right after a scale would still
        report the old replica counts and look ready. Raises NotFound when it does not exist.
        """
        deployment = self._json(
            f"read deployment {namespace}/{name}",
            lambda: self.apps.read_namespaced_deployment(
                name, namespace, _preload_content=False, _request_timeout=self.request_timeout_s
            ),
        )
        metadata = deployment.get("metadata") or {}
        spec = deployment.get("spec") or {}
        status = deployment.get("status") or {}
        if int(status.get("observedGeneration", 0)) < int(metadata.get("generation", 1)):
            return False
        desired = int(spec.get("replicas", 1))  # the API defaults an omitted replicas to 1
        return int(status.get("readyReplicas", 0)) >= desired

    # --- node changes ---------------------------------------------------------------------
    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Merge `labels` into the node's labels; a None value removes that label (null in the patch)."""
        if not labels:
            return
        self._patch_node(node, {"metadata": {"labels": dict(labels)}}, f"label node {node}")

    def cordon(self, node: str) -> None:
        """Mark the node unschedulable; running pods stay (draining is evict_pod's job)."""
        self._patch_node(node, {"spec": {"unschedulable": True}}, f"cordon node {node}")

    def uncordon(self, node: str) -> None:
        """Make the node schedulable again."""
        self._patch_node(node, {"spec": {"unschedulable": False}}, f"uncordon node {node}")

    def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the Eviction API (policy/v1), which honours PodDisruptionBudgets.

        Raises EvictionBlocked when the API answers 429 (a PDB forbids it now: retry later),
        NotFound when the pod is gone, ClusterError otherwise.
        """
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        self._call(
            f"evict pod {namespace}/{name}",
            lambda: self.core.create_namespaced_pod_eviction(
                name, namespace, body,  # type: ignore[arg-type]  # the client serializes a plain dict body as it is
                field_manager=FIELD_MANAGER, _headers=json_content(), _preload_content=False,
                _request_timeout=self.request_timeout_s,
            ),
            too_many_requests_is_eviction_block=True,
        )

    def restart_device_plugin(self, node: str) -> None:
        """Delete the NVIDIA device plugin pod on `node`; its DaemonSet recreates it, and the new
        pod reads the config named by the node's `nvidia.com/device-plugin.config` label.

        Raises ClusterError naming the namespace and selector when no such pod runs on the node.
        """
        namespace = self.device_plugin_namespace
        field_selector = f"spec.nodeName={node}"
        pods = list(
            self._paginate(
                f"find the device plugin pod on node {node}",
                lambda **kw: self.core.list_namespaced_pod(namespace, **kw),
                label_selector=DEVICE_PLUGIN_SELECTOR,
                field_selector=field_selector,
            )
        )
        if not pods:
            raise ClusterError(
                f"no NVIDIA device plugin pod on node {node}: none in namespace {namespace!r} matches "
                f"label selector {DEVICE_PLUGIN_SELECTOR!r} with field selector {field_selector!r} "
                "(is the GPU operator installed there, and GPUPLANE_DEVICE_PLUGIN_NAMESPACE right?)"
            )
        for pod in pods:
            pod_name = pod["metadata"]["name"]
            try:
                self._call(
                    f"delete device plugin pod {namespace}/{pod_name}",
                    functools.partial(
                        self.core.delete_namespaced_pod,
                        pod_name, namespace, _preload_content=False, _request_timeout=self.request_timeout_s,
                    ),
                )
            except NotFound:
                pass  # already gone (restarted by someone else): the outcome we wanted

    # --- workloads ------------------------------------------------------------------------
    def create_workload(self, spec: WorkloadSpec) -> None:
        """Create the apps/v1 Deployment of `manifests.deployment_manifest(spec)`.

        Raises ClusterError saying so when a Deployment of that name already exists (409).
        """
        action = f"create deployment {spec.namespace}/{spec.name}"
        try:
            self._call(
                action,
                lambda: self.apps.create_namespaced_deployment(
                    spec.namespace,
                    deployment_manifest(spec),  # type: ignore[arg-type]  # a plain dict, shared with the simulator
                    field_manager=FIELD_MANAGER,
                    _headers=json_content(),
                    _preload_content=False,
                    _request_timeout=self.request_timeout_s,
                ),
            )
        except Conflict as exc:
            raise ClusterError(f"{action}: deployment {spec.namespace}/{spec.name} already exists ({exc})") from None

    def scale_workload(self, namespace: str, name: str, replicas: int) -> None:
        """Set the Deployment's desired replicas through its scale subresource.

        The scale subresource changes nothing but the replica count, so it cannot clobber a
        concurrent change to the pod template. Raises NotFound when the Deployment does not exist.
        """
        if replicas < 0:
            # The API server would answer 422 Invalid; say it without the round trip.
            raise ClusterError(f"spec.replicas of deployment {namespace}/{name} must be >= 0, not {replicas}")
        self._call(
            f"scale deployment {namespace}/{name} to {replicas}",
            lambda: self.apps.patch_namespaced_deployment_scale(
                name, namespace, {"spec": {"replicas": replicas}}, field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH, _preload_content=False, _request_timeout=self.request_timeout_s,
            ),
        )

    def delete_workload(self, namespace: str, name: str) -> None:
        """Delete the Deployment with foreground propagation; NotFound when there is none (as
        SimulatedCluster raises it; a caller that wants a retried delete quiet catches it).

        Foreground, not Background: the Deployment stays visible (with a deletionTimestamp) until
        its ReplicaSets and pods are gone, so "the Deployment still exists" keeps meaning "its GPUs
        may still be held". With Background the object vanishes at once while its pods are still
        terminating on their GPUs, and a replacement placed there could fail to fit.
        """
        self._call(
            f"delete deployment {namespace}/{name}",
            lambda: self.apps.delete_namespaced_deployment(
                name, namespace, propagation_policy="Foreground", _preload_content=False,
                _request_timeout=self.request_timeout_s,
            ),
        )

    # --- plumbing -------------------------------------------------------------------------
    def _patch_node(self, node: str, body: dict[str, Any], action: str) -> None:
        # Name the patch type: the generated client defaults PATCH to JSON Patch (a list of
        # operations) and only its REST layer quietly swaps that for an object body. Strategic
        # merge is what kubectl uses for built-in kinds; for labels and a boolean it equals a
        # merge patch, including null meaning "remove".
        self._call(
            action,
            lambda: self.core.patch_node(
                node, body, field_manager=FIELD_MANAGER, _content_type=STRATEGIC_MERGE_PATCH,
                _preload_content=False, _request_timeout=self.request_timeout_s,
            ),
        )

    def _list(self, action: str, list_call: Callable[..., Any], **params: Any) -> tuple[list[dict[str, Any]], str]:
        """All items of a list and its resourceVersion (all pages come from one snapshot: the first's version)."""
        versions: list[str] = []
        return list(self._paginate(action, list_call, versions, **params)), (versions or [""])[0]

    def _paginate(self, action: str, list_call: Callable[..., Any], versions: list[str] | None = None,
                  **params: Any) -> Iterator[dict[str, Any]]:
        """Items of a list endpoint as raw JSON, following `metadata.continue` page by page (each
        page's resourceVersion appended to `versions`)."""
        token: str | None = None
        while True:
            page_params = dict(params, limit=self.page_size, _preload_content=False, _request_timeout=self.request_timeout_s)
            if token:
                page_params["_continue"] = token
            page = self._json(action, functools.partial(list_call, **page_params))
            yield from page.get("items") or []
            metadata = page.get("metadata") or {}
            if versions is not None:
                versions.append(str(metadata.get("resourceVersion") or ""))
            token = metadata.get("continue")
            if not token:
                return

    def _watch(
        self, action: str, list_call: Callable[..., Any], resource_version: str, timeout_s: float, **params: Any
    ) -> list[dict[str, Any]]:
        """The raw events of one watch bounded by `timeout_s`; with a timeout the client never
        retries a 410 Gone but raises it (ResourceVersionGone through `_raw`)."""
        stream = _RawWatch().stream(
            list_call, resource_version=resource_version, timeout_seconds=max(1, round(timeout_s)),
            allow_watch_bookmarks=True, _request_timeout=(self.request_timeout_s[0], timeout_s + 5), **params,
        )
        return self._raw(action, lambda: list(stream))

    def _json(self, action: str, call: Callable[[], Any]) -> dict[str, Any]:
        """Run a call made with `_preload_content=False` and decode its JSON object."""
        response = self._raw(action, call)
        try:
            decoded = json.loads(response.data)
        except ValueError as exc:
            raise ClusterError(f"{action}: the Kubernetes API at {self.host} answered with invalid JSON: {exc}") from None
        finally:
            response.release_conn()
        if not isinstance(decoded, dict):
            raise ClusterError(f"{action}: the Kubernetes API at {self.host} answered with {type(decoded).__name__}, not an object")
        return decoded

    def _call(self, action: str, call: Callable[[], Any], *, too_many_requests_is_eviction_block: bool = False) -> None:
        """Run a call made with `_preload_content=False` whose answer we do not need."""
        response = self._raw(action, call, too_many_requests_is_eviction_block=too_many_requests_is_eviction_block)
        # An unread body would keep the pooled connection busy; read it so it can be reused.
        response.drain_conn()
        response.release_conn()

    def _raw(self, action: str, call: Callable[[], _T], *, too_many_requests_is_eviction_block: bool = False) -> _T:
        """Run one API call, turning client and transport failures into ClusterError and subclasses."""
        try:
            return call()
        except client.ApiException as exc:
            raise api_error(action, exc, self.host, too_many_requests_is_eviction_block) from None
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"{action}: cannot reach the Kubernetes API at {self.host}: {transport_reason(exc)}") from None


class _RawWatch(watch.Watch):
    # Events as plain JSON, no client models (which also reject objects missing optional fields).
    def get_return_type(self, func: Any) -> None:
        return None


def _client_from_kubeconfig(path: str) -> client.ApiClient:
    try:
        return config.new_client_from_config(config_file=path)
    # The loader raises ConfigException, OSError, YAML and key errors depending on what is
    # wrong with the file; all of them mean "this kubeconfig is unusable".
    except Exception as exc:  # noqa: BLE001
        raise ClusterError(f"cannot load kubeconfig {path!r}: {type(exc).__name__}: {exc}") from None
