"""The JSON Patch (RFC 6902) the admission webhook answers for a pod: pure functions, no Django.

``pod_patch(pod, change)`` gives the operations that pin the pod to its node (required node
affinity on kubernetes.io/hostname, ANDed into every term the pod already has), swap its GPU
resource for the one its partition needs, add the MPS variables and label and annotate it with the
decision. Every value is a function of the decision alone (no timestamps), and the webhook leaves a
pod that carries ``ANNOTATION_ADMISSION`` alone, so a reinvocation on its own output patches nothing.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodes.contract import GPUPLANE_PREFIX, LABEL_HOSTNAME, RESOURCE_PREFIX_NVIDIA

# pod: what the webhook decided ("placed on <node>", "unplaced: <why>"): also its own "seen" mark.
ANNOTATION_ADMISSION = f"{GPUPLANE_PREFIX}/admission"
MAX_ANNOTATION_CHARS = 1000


@dataclass(frozen=True)
class PodChange:
    """What to change on a pod: node ("" = no pinning), GPU resources, env, labels, annotations."""

    node: str = ""
    resources: Mapping[str, int] = field(default_factory=dict)  # nvidia.com/* limits of its GPU container
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def escape(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def gpu_container_index(pod: Mapping[str, Any]) -> int | None:
    """The first container that asks for an nvidia.com/* resource (None if none does)."""
    for index, container in enumerate((pod.get("spec") or {}).get("containers") or []):
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            if any(str(key).startswith(RESOURCE_PREFIX_NVIDIA) for key in (resources.get(part) or {})):
                return index
    return None


def _map_ops(path: str, current: Mapping[str, Any] | None, wanted: Mapping[str, str]) -> list[dict[str, Any]]:
    if not wanted:
        return []
    if not isinstance(current, Mapping):
        return [{"op": "add", "path": path, "value": dict(wanted)}]
    return [{"op": "replace" if key in current else "add", "path": f"{path}/{escape(key)}", "value": value}
            for key, value in wanted.items() if current.get(key) != value]


def _affinity_ops(spec: Mapping[str, Any], node: str) -> list[dict[str, Any]]:
    expression: dict[str, Any] = {"key": LABEL_HOSTNAME, "operator": "In", "values": [node]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        return [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": required}}}]
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, Mapping):
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity",
                 "value": {"requiredDuringSchedulingIgnoredDuringExecution": required}}]
    current = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = current.get("nodeSelectorTerms") if isinstance(current, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
                 "value": required}]
    # Terms are ORed, expressions within a term ANDed: the node goes into every term.
    ops: list[dict[str, Any]] = []
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    for index, term in enumerate(terms):
        expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
        if isinstance(expressions, list):
            ops.append({"op": "add", "path": f"{base}/{index}/matchExpressions/-", "value": expression})
        else:
            ops.append({"op": "add", "path": f"{base}/{index}/matchExpressions", "value": [expression]})
    return ops


def _container_ops(container: Mapping[str, Any], index: int, change: PodChange) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    path = f"/spec/containers/{index}"
    if change.resources:
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            ops.append({"op": "add", "path": f"{path}/resources",
                        "value": {"limits": {k: str(v) for k, v in change.resources.items()}}})
        else:
            for part in ("limits", "requests"):
                current = resources.get(part)
                if not isinstance(current, Mapping):
                    if part == "limits":
                        ops.append({"op": "add", "path": f"{path}/resources/limits",
                                    "value": {k: str(v) for k, v in change.resources.items()}})
                    continue
                for key in current:
                    if str(key).startswith(RESOURCE_PREFIX_NVIDIA) and key not in change.resources:
                        ops.append({"op": "remove", "path": f"{path}/resources/{part}/{escape(key)}"})
                # Extended resources: a request, when stated, must equal the limit.
                if part == "limits" or any(str(k).startswith(RESOURCE_PREFIX_NVIDIA) for k in current):
                    ops.extend(_map_ops(f"{path}/resources/{part}", current,
                                        {k: str(v) for k, v in change.resources.items()}))
    if change.env:
        env = container.get("env")
        if not isinstance(env, list):
            ops.append({"op": "add", "path": f"{path}/env",
                        "value": [{"name": k, "value": v} for k, v in change.env.items()]})
        else:
            positions = {item.get("name"): i for i, item in enumerate(env) if isinstance(item, Mapping)}
            for name, value in change.env.items():
                if name in positions:
                    if env[positions[name]] != {"name": name, "value": value}:
                        ops.append({"op": "replace", "path": f"{path}/env/{positions[name]}",
                                    "value": {"name": name, "value": value}})
                else:
                    ops.append({"op": "add", "path": f"{path}/env/-", "value": {"name": name, "value": value}})
    return ops


def pod_patch(pod: Mapping[str, Any], change: PodChange) -> list[dict[str, Any]]:
    """The JSON Patch that makes ``pod`` carry ``change`` ([] when it already does)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ops = _map_ops("/metadata/labels", meta.get("labels"), change.labels)
    ops += _map_ops("/metadata/annotations", meta.get("annotations"),
                    {k: v[:MAX_ANNOTATION_CHARS] for k, v in change.annotations.items()})
    if change.node:
        ops += _affinity_ops(spec, change.node)
    index = gpu_container_index(pod)
    if index is not None:
        ops += _container_ops(spec["containers"][index], index, change)
    return ops


def apply_patch(document: Mapping[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply a JSON Patch of add / replace / remove operations (what ``pod_patch`` writes), as the
    API server would: a path that does not resolve raises ``ValueError``. For tests and the dry run."""
    result: Any = copy.deepcopy(dict(document))
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent = result
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if isinstance(parent, list):
            if op["op"] == "add":
                parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                parent[int(last)] = copy.deepcopy(op["value"])
            else:
                del parent[int(last)]
        elif isinstance(parent, dict):
            if op["op"] in ("replace", "remove") and last not in parent:
                raise ValueError(f"{op['op']} of a missing member: {op['path']}")
            if op["op"] == "remove":
                del parent[last]
            else:
                parent[last] = copy.deepcopy(op["value"])
        else:
            raise ValueError(f"{op['path']} does not resolve to an object or array")
    return result
