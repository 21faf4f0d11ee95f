"""Every Kubernetes API request KubernetesCluster can make, as the RBAC attributes the API server
authorizes: (verb, API group, resource[/subresource]).

Derived by running the code, not by reading a list kept beside it: every public operation of
`nodes.cluster.kubernetes.KubernetesCluster` is called, with arguments made from its type hints,
against tests/nodes/kubernetes/fake_api.py's API server in several moods (everything exists; nothing
exists; every write conflicts), so that a branch such as "read, and create if missing" shows all
its requests. Each recorded HTTP request is turned into its authorization attributes the way the
API server's request-info resolver does.

`client_methods_in_code()` reads the module for the generated client's methods it names, and
`run_every_operation()` reports which of them ran: a named method that no operation reached means
a branch the moods miss, and the RBAC test fails on it rather than trust an incomplete run.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from nodes.cluster import kubernetes as kubernetes_backend
from nodes.cluster.base import ClusterConfigMap
from nodes.cluster.kubernetes import KubernetesCluster
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import FakeKubeAPI, RecordedRequest, Reply

MOODS = ("everything exists", "nothing exists", "every write conflicts")


@dataclass(frozen=True, order=True)
class Access:
    """What RBAC authorizes: a verb on a resource (with its subresource) of an API group."""

    verb: str
    group: str
    resource: str  # "pods", or "pods/eviction" for a subresource

    def __str__(self) -> str:
        return f"{self.verb} {self.group or 'core'}/{self.resource}"


def access_of(method: str, path: str, query: dict[str, list[str]]) -> Access:
    """The RBAC attributes of one request (Kubernetes' RequestInfoFactory, for resource requests)."""
    parts = [part for part in path.split("/") if part]
    if parts[0] == "api":  # /api/v1/...
        group, rest = "", parts[2:]
    elif parts[0] == "apis":  # /apis/<group>/<version>/...
        group, rest = parts[1], parts[3:]
    else:
        raise AssertionError(f"not a resource request: {method} {path}")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # /namespaces/<ns>/<resource>/...: the namespace is a scope, not the resource
    resource, name, subresource = (rest + [None, None])[:3]
    watching = query.get("watch", ["false"])[0] in ("true", "1")
    verb = {
        "GET": "watch" if watching else ("get" if name else "list"),
        "HEAD": "get",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }[method]
    return Access(verb, group, f"{resource}/{subresource}" if subresource else str(resource))


# --- the API server's answers -------------------------------------------------------------------

def _item_for(resource: str, namespace: str) -> dict[str, Any]:
    """One plausible object of a listed resource (the backend parses what it lists)."""
    if resource == "nodes":
        return k8s.gpu_node("gpu-node-1")
    if resource == "pods":
        return k8s.device_plugin_pod("gpu-node-1") if namespace else k8s.pod("llama-0", limits={"nvidia.com/gpu": "1"})
    return {"apiVersion": "v1", "kind": "Object", "metadata": {"name": "object-1", "namespace": namespace or "default",
                                                               "resourceVersion": "1", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "replicas": 1}, "status": {}}


def _answer(mood: str, errors: list[str], request: RecordedRequest) -> Reply:
    try:
        return _answer_in(mood, request)
    except Exception as exc:  # noqa: BLE001 - a broken answer must show, not make the client retry
        errors.append(f"{mood}: {request.method} {request.path}: {type(exc).__name__}: {exc}")
        return Reply(500, k8s.status_error(500, "InternalError", f"cluster_calls: {type(exc).__name__}: {exc}"))


def _answer_in(mood: str, request: RecordedRequest) -> Reply:
    parts = [part for part in request.path.split("/") if part]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    namespace = rest[1] if len(rest) >= 3 and rest[0] == "namespaces" else ""
    if namespace:
        rest = rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    if request.method == "GET" and request.query.get("watch"):
        return Reply(200, b"")  # the watch ends at once: no events
    if request.method == "GET" and name is None:
        items = [] if mood == "nothing exists" else [_item_for(resource, namespace)]
        return Reply(200, k8s.list_object("List", items))
    if request.method in ("GET", "DELETE", "PATCH", "PUT") and mood == "nothing exists":
        return Reply(404, k8s.not_found(resource, name or ""))
    if request.method in ("POST", "PUT", "PATCH") and mood == "every write conflicts":
        return Reply(409, k8s.already_exists(resource, name or ""))
    if request.method == "GET":
        return Reply(200, _item_for(resource, namespace))
    body = request.body if isinstance(request.body, dict) else {}
    return Reply(201 if request.method == "POST" else 200, body or {"kind": "Status", "status": "Success"})


# --- arguments from type hints ------------------------------------------------------------------

EXAMPLE_STRINGS = {"namespace": "ml-serving", "node": "gpu-node-1", "name": "llama-7b-gpu-node-1",
                   "resource_version": "1"}


def example(annotation: Any, name: str) -> Any:
    """A value of type `annotation` for a parameter called `name`; AssertionError when none can be
    made (then add a case here, so that the new operation is exercised)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return example(next(a for a in args if a is not type(None)), name)
    if annotation is str:
        return EXAMPLE_STRINGS.get(name, f"gpuplane-{name.replace('_', '-')}")
    if annotation is bool:
        return True
    if annotation is int:
        return 2
    if annotation is float:
        return 1.0
    if origin is dict:
        return {"gpuplane.io/example": example(args[1], name)} if args else {}
    if origin in (list, tuple, set, frozenset):
        return origin([example(args[0], name)]) if args else origin()
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        hints = typing.get_type_hints(annotation)
        values = {f.name: example(hints[f.name], f.name) for f in dataclasses.fields(annotation)}
        return annotation(**values)
    raise AssertionError(f"cannot make an example {annotation!r} for parameter {name!r}: "
                         "teach tests/deploy/cluster_calls.py:example() this type")


def operations() -> dict[str, Callable[..., Any]]:
    """Every public operation of KubernetesCluster (not constructors, not properties)."""
    found = {}
    for name, member in inspect.getmembers(KubernetesCluster):
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        found[name] = member
    return found


def arguments(function: Callable[..., Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(function, vars(inspect.getmodule(function)))
    parameters = list(inspect.signature(function).parameters.values())[1:]  # not self
    return {p.name: example(hints[p.name], p.name) for p in parameters if p.default is inspect.Parameter.empty}


# Arguments, beyond the examples, that reach another branch of an operation: a ConfigMap not read
# before (no resourceVersion) is created, not replaced.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "write_configmap": [{"configmap": ClusterConfigMap("gpu-operator", "gpuplane-device-plugin-configs", {})}],
}


def argument_sets(name: str, function: Callable[..., Any]) -> list[dict[str, Any]]:
    examples = arguments(function)
    return [examples] + [{**examples, **variant} for variant in VARIANTS.get(name, [])]


# --- which generated client methods ran -------------------------------------------------------------

def _api_classes() -> list[type]:
    return [cls for _, cls in inspect.getmembers(client, inspect.isclass)
            if cls.__module__.startswith("kubernetes.client.api.")]


def _backend_modules() -> list[Path]:
    """nodes/cluster/kubernetes.py and the modules of the mixins KubernetesCluster is made of
    (kubernetes_configmaps.py), which call the client through it."""
    return sorted({Path(inspect.getfile(cls)) for cls in KubernetesCluster.__mro__
                   if cls.__module__.startswith("nodes.cluster.")} | {Path(kubernetes_backend.__file__)})


@functools.cache
def client_methods_in_code() -> frozenset[str]:
    """The generated client's methods (list_node, create_namespaced_pod_eviction...) that
    nodes/cluster/kubernetes.py and its mixins' modules name anywhere."""
    methods = {name for cls in _api_classes() for name, _ in inspect.getmembers(cls, inspect.isfunction)
               if not name.startswith("_") and not name.endswith("_with_http_info")}
    methods -= {"api_client"}
    found: set[str] = set()
    for path in _backend_modules():
        tree = ast.parse(path.read_text())
        found |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in methods}
    return frozenset(found)


@contextmanager
def _recording_client_methods(names: frozenset[str], called: set[str]) -> Iterator[None]:
    originals: list[tuple[type, str, Any]] = []
    for cls in _api_classes():
        for name in names:
            original = cls.__dict__.get(name)
            if original is None:
                continue

            def recording(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
                called.add(_name)
                return _original(*args, **kwargs)

            originals.append((cls, name, original))
            setattr(cls, name, recording)
    try:
        yield
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


# --- the run ------------------------------------------------------------------------------------

@dataclass
class CallLog:
    """What running every operation in every mood did."""

    accesses: dict[Access, set[str]] = field(default_factory=dict)  # access -> operations that needed it
    client_methods: set[str] = field(default_factory=set)
    operations: set[str] = field(default_factory=set)
    answer_errors: list[str] = field(default_factory=list)  # requests the fake could not answer


def run_every_operation(server: FakeKubeAPI) -> CallLog:
    """Call every operation of KubernetesCluster in every mood against `server`; an operation may
    fail (a NotFound in "nothing exists" is expected): its requests up to then still count."""
    log = CallLog()
    with _recording_client_methods(client_methods_in_code(), log.client_methods):
        for mood in MOODS:
            for name, function in operations().items():
                for kwargs in argument_sets(name, function):
                    server.reset()
                    server.serve(functools.partial(_answer, mood, log.answer_errors))
                    cluster = KubernetesCluster.for_host(server.url, token="rbac-test", request_timeout_s=(2.0, 5.0))
                    try:
                        getattr(cluster, name)(**kwargs)
                    except Exception:  # noqa: BLE001, S110 - the requests made are what counts, not the outcome
                        pass
                    log.operations.add(name)
                    for request in server.requests:
                        log.accesses.setdefault(access_of(request.method, request.path, request.query), set()).add(name)
    return log
