"""A small stateful Kubernetes cluster behind FakeKubeAPI, for driving whole rollouts through KubernetesCluster.

`FakeCluster` keeps Nodes, Pods and Deployments as the API server's JSON and answers the requests
KubernetesCluster sends (node PATCHes, pod lists with label and field selectors, the policy/v1
Eviction subresource, Deployment create / read / scale / delete, pod DELETE). Between two calls of
`tick()` nothing happens on its own, so a test decides when the controllers run, as a clock:

- ReplicaSet controller, scheduler and kubelet: each Deployment keeps `spec.replicas` pods; a new
  pod is bound to the node its required hostname affinity names unless that node is cordoned (then
  it stays Pending, unbound, as the scheduler leaves it); a bound pod is Running and Ready one tick
  after it was created.
- The device plugin DaemonSet: a deleted plugin pod is replaced at once under a new name; one tick
  later the new pod has read the config its node's `nvidia.com/device-plugin.config` label names
  (from the ConfigMap of named configs, in NVIDIA's format), and GPU feature discovery publishes
  what it does: `nvidia.com/gpu.replicas`, `nvidia.com/gpu.sharing-strategy`, the product's
  `-SHARED` suffix and allocatable `nvidia.com/gpu` = GPUs x replicas. A node's labels alone change
  nothing until its plugin restarts, as on a real cluster.
- The node lifecycle controller: a cordoned node carries the `node.kubernetes.io/unschedulable`
  taint, removed again on uncordon.

- ConfigMaps: read, created (POST) and replaced (PUT, refused with 409 from a stale
  resourceVersion), `?dryRun=All` checked and not stored; the device plugin reads its named
  configs from `gpu-operator/gpuplane-device-plugin-configs` as it is when it starts.

Faults: `evictions_refused` answers that many evictions with the PodDisruptionBudget's 429,
`plugin_hangs` keeps every new plugin pod from ever starting (so nothing is published), and
`configmap_writes_forbidden` answers ConfigMap writes with RBAC's 403.
"""
from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable
from itertools import count
from typing import Any

from nodes.cluster.manifests import pinned_node
from nodes.contract import (
    GPU_PRODUCT_SHARED_SUFFIX,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_COUNT,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
)
from nodes.sharing.configmap import to_yaml
from nodes.sharing.device_plugin import DEVICE_PLUGIN_CONFIGMAP, validate_device_plugin_config
from nodes.sharing.node_config import NodeConfig, render_device_plugin_config
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import FakeKubeAPI, RecordedRequest, Reply
from tests.nodes.kubernetes.fake_configmaps import FakeConfigMaps

PLUGIN_NAMESPACE = "gpu-operator"
PLUGIN_LABELS = {"app": "nvidia-device-plugin-daemonset"}
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

_NODE = r"/api/v1/nodes/(?P<name>[^/]+)"
_PODS = r"/api/v1/namespaces/(?P<ns>[^/]+)/pods"
_DEPLOYMENTS = r"/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments"
_CONFIGMAPS = r"/api/v1/namespaces/(?P<ns>[^/]+)/configmaps"


class FakeCluster(FakeConfigMaps):
    """The cluster state behind `kube` (which it serves from then on); see the module docstring."""

    def __init__(self, kube: FakeKubeAPI, configs: tuple[NodeConfig, ...]) -> None:
        self._lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # "namespace/name" -> Pod
        self.deployments: dict[str, dict[str, Any]] = {}  # "namespace/name" -> Deployment
        # ConfigMaps by "namespace/name"; the device plugin's, of named configs in NVIDIA's format,
        # holds `configs` to begin with (what the operator set up).
        self.configmaps: dict[str, dict[str, Any]] = {}
        self._versions = count(1000)
        plugin_data = {name: to_yaml(body) for name, body in (render_device_plugin_config(c) for c in configs)}
        self._store_configmap({"metadata": {"name": DEVICE_PLUGIN_CONFIGMAP, "namespace": PLUGIN_NAMESPACE},
                               "data": plugin_data})
        self._names = count(1)
        self.evictions_refused = 0
        self.plugin_hangs = False
        self.configmap_writes_forbidden = False
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Reply]]] = [
            ("GET", re.compile(r"/api/v1/nodes"), self._list_nodes),
            ("PATCH", re.compile(_NODE), self._patch_node),
            ("GET", re.compile(r"/api/v1/pods"), self._list_pods),
            ("GET", re.compile(_PODS), self._list_pods),
            ("POST", re.compile(_PODS + r"/(?P<name>[^/]+)/eviction"), self._evict),
            ("DELETE", re.compile(_PODS + r"/(?P<name>[^/]+)"), self._delete_pod),
            ("POST", re.compile(_DEPLOYMENTS), self._create_deployment),
            ("GET", re.compile(_DEPLOYMENTS + r"/(?P<name>[^/]+)"), self._read_deployment),
            ("PATCH", re.compile(_DEPLOYMENTS + r"/(?P<name>[^/]+)/scale"), self._scale_deployment),
            ("DELETE", re.compile(_DEPLOYMENTS + r"/(?P<name>[^/]+)"), self._delete_deployment),
            ("GET", re.compile(_CONFIGMAPS + r"/(?P<name>[^/]+)"), self._read_configmap),
            ("POST", re.compile(_CONFIGMAPS), self._create_configmap),
            ("PUT", re.compile(_CONFIGMAPS + r"/(?P<name>[^/]+)"), self._replace_configmap),
        ]
        kube.serve(self._answer)

    # --- set-up ---------------------------------------------------------------------------

    def add_gpu_node(self, name: str, config: NodeConfig, gpu_count: int = 1) -> None:
        """An H100 node running `config` already (its plugin started on it), with its plugin pod."""
        node = k8s.gpu_node(name)
        node["spec"].pop("taints")  # gpuplane's placements here tolerate nothing: keep the node open
        labels = node["metadata"]["labels"]
        labels[LABEL_GPU_COUNT] = str(gpu_count)
        labels[LABEL_DEVICE_PLUGIN_CONFIG] = render_device_plugin_config(config)[0]
        with self._lock:
            self.nodes[name] = node
            plugin = self._start_plugin(name)
            _set_ready(self.pods[plugin])
            self._publish(name)

    # --- what a test reads ----------------------------------------------------------------

    def ready_pods(self, label: str) -> dict[str, int]:
        """Ready pods per value of pod label `label` (e.g. per gpuplane deployment id)."""
        with self._lock:
            ready: dict[str, int] = {}
            for pod in self.pods.values():
                value = pod["metadata"]["labels"].get(label)
                if value is not None and _ready(pod):
                    ready[value] = ready.get(value, 0) + 1
            return ready

    def pods_on(self, node: str) -> list[str]:
        with self._lock:
            return sorted(key for key, pod in self.pods.items() if pod["spec"].get("nodeName") == node)

    # --- the controllers ------------------------------------------------------------------

    def tick(self) -> None:
        """One round of the controllers (see the module docstring)."""
        with self._lock:
            # The kubelet first: pods bound before this tick start (the controllers' new ones next time).
            for pod in self.pods.values():
                if not pod["spec"].get("nodeName") or _ready(pod):
                    continue
                if pod["metadata"]["namespace"] == PLUGIN_NAMESPACE:
                    if self.plugin_hangs:
                        continue
                    self._publish(pod["spec"]["nodeName"])  # the new plugin reads its config
                _set_ready(pod)
            for key in sorted(self.deployments):
                self._reconcile_deployment(key)

    def _reconcile_deployment(self, key: str) -> None:
        deployment = self.deployments[key]
        ours = sorted(k for k, pod in self.pods.items() if _owned_by(pod, deployment))
        wanted = deployment["spec"]["replicas"]
        # Scaling down removes unbound pods first, as the ReplicaSet controller ranks them.
        for extra in sorted(ours, key=lambda k: bool(self.pods[k]["spec"].get("nodeName")))[: max(0, len(ours) - wanted)]:
            del self.pods[extra]
        for _ in range(wanted - len(ours)):
            self._create_pod(deployment)
        for pod_key in ours:  # the scheduler binds a Pending pod once its node is open
            pod = self.pods.get(pod_key)
            node = pinned_node(deployment)
            if pod is not None and not pod["spec"].get("nodeName") and node and not self._cordoned(node):
                pod["spec"]["nodeName"] = node

    def _create_pod(self, deployment: dict[str, Any]) -> None:
        meta = deployment["metadata"]
        template = deployment["spec"]["template"]
        name = f"{meta['name']}-5d8f7c-{next(self._names):05d}"
        node = pinned_node(deployment)
        pod = _pod(name, meta["namespace"], copy.deepcopy(template["metadata"]), copy.deepcopy(template["spec"]["containers"]),
                   owner=("ReplicaSet", f"{meta['name']}-5d8f7c"))
        if node and node in self.nodes and not self._cordoned(node):
            pod["spec"]["nodeName"] = node
        self.pods[f"{meta['namespace']}/{name}"] = pod

    def _start_plugin(self, node: str) -> str:
        """The DaemonSet's pod for `node`, new and not Ready (a fresh name every time); its key."""
        name = f"nvidia-device-plugin-daemonset-{next(self._names):05d}"
        pod = _pod(name, PLUGIN_NAMESPACE, {"labels": dict(PLUGIN_LABELS)}, [], owner=("DaemonSet", "nvidia-device-plugin-daemonset"))
        pod["spec"]["nodeName"] = node
        key = f"{PLUGIN_NAMESPACE}/{name}"
        self.pods[key] = pod
        return key

    def _publish(self, node: str) -> None:
        """GFD and the device plugin advertise the config the node's label names, read from the
        ConfigMap as it is now (no label: exclusive). A missing config leaves the node as it was,
        as a crash-looping plugin would."""
        obj = self.nodes[node]
        labels = obj["metadata"]["labels"]
        wanted = labels.get(LABEL_DEVICE_PLUGIN_CONFIG, "")
        configs = self._plugin_configs()
        if wanted and wanted not in configs:
            return
        config = configs.get(wanted, {"version": "v1"})
        spec = validate_device_plugin_config(config)
        product = labels[LABEL_GPU_PRODUCT].removesuffix(GPU_PRODUCT_SHARED_SUFFIX)
        labels[LABEL_GPU_PRODUCT] = product + (GPU_PRODUCT_SHARED_SUFFIX if spec.strategy != "none" else "")
        labels[LABEL_GPU_REPLICAS] = str(spec.replicas)
        labels[LABEL_SHARING_STRATEGY] = spec.strategy
        gpus = str(int(labels[LABEL_GPU_COUNT]) * spec.replicas)
        obj["status"]["capacity"][RESOURCE_GPU] = obj["status"]["allocatable"][RESOURCE_GPU] = gpus

    def _cordoned(self, node: str) -> bool:
        return bool(self.nodes[node]["spec"].get("unschedulable"))

    # --- the API server -------------------------------------------------------------------

    def _answer(self, request: RecordedRequest) -> Reply:
        if request.param("watch") == "true":  # no history kept: every version is too old, so clients relist
            return Reply(410, k8s.status_error(410, "Expired", "too old resource version"))
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(request.path)
            if method == request.method and match:
                with self._lock:
                    try:
                        return handler(request, **match.groupdict())
                    except ValueError as error:
                        return Reply(400, k8s.status_error(400, "BadRequest", str(error)))
        return Reply(404, k8s.status_error(404, "NotFound", "the server could not find the requested resource"))

    def _list_nodes(self, request: RecordedRequest) -> Reply:
        return Reply(200, k8s.list_object("Node", [_unversioned(self.nodes[n]) for n in sorted(self.nodes)]))

    def _patch_node(self, request: RecordedRequest, name: str) -> Reply:
        node = self.nodes.get(name)
        if node is None:
            return Reply(404, k8s.not_found("nodes", name))
        if request.content_type not in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
            return Reply(415, k8s.status_error(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {request.content_type}"))
        body = request.body or {}
        for key, value in ((body.get("metadata") or {}).get("labels") or {}).items():
            if value is None:
                node["metadata"]["labels"].pop(key, None)
            else:
                node["metadata"]["labels"][key] = value
        if "unschedulable" in (body.get("spec") or {}):
            cordoned = bool(body["spec"]["unschedulable"])
            node["spec"]["unschedulable"] = cordoned
            taints = [t for t in node["spec"].get("taints", []) if t["key"] != UNSCHEDULABLE_TAINT["key"]]
            node["spec"]["taints"] = [*taints, dict(UNSCHEDULABLE_TAINT)] if cordoned else taints
        return Reply(200, copy.deepcopy(node))

    def _list_pods(self, request: RecordedRequest, ns: str | None = None) -> Reply:
        selected = [
            _unversioned(pod) for key, pod in sorted(self.pods.items())
            if (ns is None or pod["metadata"]["namespace"] == ns)
            and _labels_match(pod, request.param("labelSelector"))
            and _fields_match(pod, request.param("fieldSelector"))
        ]
        return Reply(200, k8s.list_object("Pod", selected))

    def _evict(self, request: RecordedRequest, ns: str, name: str) -> Reply:
        if f"{ns}/{name}" not in self.pods:
            return Reply(404, k8s.not_found("pods", name))
        if self.evictions_refused:
            self.evictions_refused -= 1
            return Reply(429, k8s.eviction_blocked("svc-pdb", 1, 1), headers={"Retry-After": "10"})
        del self.pods[f"{ns}/{name}"]
        return Reply(201, k8s.eviction_accepted())

    def _delete_pod(self, request: RecordedRequest, ns: str, name: str) -> Reply:
        pod = self.pods.pop(f"{ns}/{name}", None)
        if pod is None:
            return Reply(404, k8s.not_found("pods", name))
        owners = pod["metadata"].get("ownerReferences") or [{}]
        if owners[0].get("kind") == "DaemonSet":
            self._start_plugin(pod["spec"]["nodeName"])
        return Reply(200, pod)

    def _create_deployment(self, request: RecordedRequest, ns: str) -> Reply:
        manifest = copy.deepcopy(request.body)
        name = manifest["metadata"]["name"]
        if f"{ns}/{name}" in self.deployments:
            return Reply(409, k8s.already_exists("deployments", name, "apps"))
        manifest["metadata"]["generation"] = 1
        self.deployments[f"{ns}/{name}"] = manifest
        return Reply(201, self._deployment_json(f"{ns}/{name}"))

    def _read_deployment(self, request: RecordedRequest, ns: str, name: str) -> Reply:
        if f"{ns}/{name}" not in self.deployments:
            return Reply(404, k8s.not_found("deployments", name, "apps"))
        return Reply(200, self._deployment_json(f"{ns}/{name}"))

    def _scale_deployment(self, request: RecordedRequest, ns: str, name: str) -> Reply:
        deployment = self.deployments.get(f"{ns}/{name}")
        if deployment is None:
            return Reply(404, k8s.not_found("deployments", name, "apps"))
        deployment["spec"]["replicas"] = int(request.body["spec"]["replicas"])
        deployment["metadata"]["generation"] += 1
        return Reply(200, k8s.scale(ns, name, deployment["spec"]["replicas"]))

    def _delete_deployment(self, request: RecordedRequest, ns: str, name: str) -> Reply:
        deployment = self.deployments.pop(f"{ns}/{name}", None)
        if deployment is None:
            return Reply(404, k8s.not_found("deployments", name, "apps"))
        for key in [k for k, pod in self.pods.items() if _owned_by(pod, deployment)]:
            del self.pods[key]  # foreground deletion: the pods go with it
        return Reply(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                           "details": {"name": name, "group": "apps", "kind": "deployments"}})

    def _deployment_json(self, key: str) -> dict[str, Any]:
        deployment = self.deployments[key]
        ready = sum(1 for pod in self.pods.values() if _owned_by(pod, deployment) and _ready(pod))
        generation = deployment["metadata"]["generation"]
        return k8s.deployment(deployment, generation=generation, observed_generation=generation, ready_replicas=ready)


# --- pods -----------------------------------------------------------------------------------


def _pod(name: str, namespace: str, metadata: dict[str, Any], containers: list[dict[str, Any]],
         owner: tuple[str, str]) -> dict[str, Any]:
    kind, owner_name = owner
    return {
        "metadata": {
            **metadata,
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": owner_name, "controller": True}],
        },
        "spec": {"containers": containers},
        "status": {"phase": "Pending", "conditions": []},
    }


def _set_ready(pod: dict[str, Any]) -> None:
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def _ready(pod: dict[str, Any]) -> bool:
    return pod["status"]["phase"] == "Running" and {"type": "Ready", "status": "True"} in pod["status"]["conditions"]


def _owned_by(pod: dict[str, Any], deployment: dict[str, Any]) -> bool:
    selector = deployment["spec"]["selector"]["matchLabels"]
    labels = pod["metadata"].get("labels") or {}
    return (pod["metadata"]["namespace"] == deployment["metadata"]["namespace"]
            and all(labels.get(k) == v for k, v in selector.items()))


def _labels_match(pod: dict[str, Any], selector: str | None) -> bool:
    labels = pod["metadata"].get("labels") or {}
    terms = [term.split("=", 1) for term in (selector or "").split(",") if term]
    return all(labels.get(key) == value for key, value in terms)


def _fields_match(pod: dict[str, Any], selector: str | None) -> bool:
    """The field selectors KubernetesCluster sends: spec.nodeName=X and status.phase!=P."""
    for term in (selector or "").split(","):
        if term.startswith("spec.nodeName="):
            if pod["spec"].get("nodeName") != term.partition("=")[2]:
                return False
        elif term.startswith("status.phase!="):
            if pod["status"]["phase"] == term.partition("!=")[2]:
                return False
        elif term:
            raise ValueError(f"field selector {term!r} is not one the fake understands")
    return True


def _unversioned(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy without metadata.resourceVersion: this fake does not move versions when it writes, so
    it shows none, and a client must take every object it lists as possibly changed."""
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("resourceVersion", None)
    return obj
