"""Kubernetes JSON (Node, Pod) -> the ClusterBackend value types.

Both backends feed raw API objects through here, so the simulated cluster is read with exactly the
interpretation a real cluster gets: GFD labels for the GPU product, count and memory, allocatable
extended resources, conditions for readiness.
"""
from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

from nodes import quantities
from nodes.cluster.base import (
    ClusterConfigMap,
    ClusterError,
    ClusterNode,
    ClusterPDB,
    ClusterPod,
    GPUDevice,
    MIGDevice,
    TokenReview,
)
from nodes.contract import (
    ANNOTATION_GPU_UUIDS,
    ANNOTATION_MIG_LAYOUT,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
)
from nodes.vocabulary import Taint


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes resource quantity ("63500m", "512Gi", "1e3", 8) as a Decimal in base units
    (``nodes.quantities``); ``ClusterError`` for a value that is not one."""
    try:
        return quantities.parse_quantity(value)
    except quantities.QuantityError as error:
        raise ClusterError(str(error)) from None


def _is_gpu_resource(name: str) -> bool:
    return name == RESOURCE_GPU or name.startswith(RESOURCE_MIG_PREFIX)


def _condition_true(status: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


def _mig_layout(annotations: dict[str, str], node_name: str) -> dict[int, tuple[MIGDevice, ...]]:
    raw = annotations.get(ANNOTATION_MIG_LAYOUT)
    if not raw:
        return {}
    try:
        decoded = json.loads(raw)
        return {
            int(index): tuple(MIGDevice(profile=str(d[0]), start=int(d[1]), size=int(d[2]), uuid=str(d[3]) if len(d) > 3 else "") for d in devices)
            for index, devices in decoded.items()
        }
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise ClusterError(f"node {node_name}: annotation {ANNOTATION_MIG_LAYOUT} is malformed: {exc}") from None


def placeholder_uuid(node_name: str, index: int) -> str:
    """The UUID a GPU gets until its real one is known (stable and unique: node name and index)."""
    return f"GPU-{node_name}-{index}"


def parse_node(obj: dict[str, Any]) -> ClusterNode:
    """One Kubernetes Node object (as JSON) -> ClusterNode.

    GPUs come from GFD labels: `nvidia.com/gpu.count` GPUs of `nvidia.com/gpu.product` with
    `nvidia.com/gpu.memory` MiB each. Kubernetes does not expose per-GPU UUIDs or MIG placements:
    they come from the node agent's GPU report (applied over this by inventory sync,
    `nodes.inventory.agent_overlay`) or, where something writes them (the simulated cluster, an
    operator), from the `gpuplane.io/gpu-uuids` and `gpuplane.io/mig-layout` annotations; until
    then UUIDs are placeholders derived from the node name and index (`placeholder_uuid`, stable,
    unique, `uuid_known` False) and MIG devices are unknown.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = meta["name"]
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    allocatable_raw = status.get("allocatable") or {}

    allocatable = {key: int(parse_quantity(value)) for key, value in allocatable_raw.items() if "/" in key}
    cpu_milli = int(parse_quantity(allocatable_raw.get("cpu", "0")) * 1000)
    memory_mib = int(parse_quantity(allocatable_raw.get("memory", "0")) / (2**20))

    gpus: list[GPUDevice] = []
    try:
        gpu_count = int(labels.get(LABEL_GPU_COUNT, "0"))
        gpu_memory_mib = int(labels.get(LABEL_GPU_MEMORY, "0"))
    except ValueError as exc:
        raise ClusterError(f"node {name}: GFD label is not an integer: {exc}") from None
    if gpu_count:
        product = labels.get(LABEL_GPU_PRODUCT, "")
        uuids = [u.strip() for u in annotations.get(ANNOTATION_GPU_UUIDS, "").split(",") if u.strip()]
        layout = _mig_layout(annotations, name)
        for index in range(gpu_count):
            known = index < len(uuids)
            devices = layout.get(index, ())
            gpus.append(
                GPUDevice(
                    index=index,
                    uuid=uuids[index] if known else placeholder_uuid(name, index),
                    product=product,
                    memory_mib=gpu_memory_mib,
                    mig_enabled=index in layout,
                    mig_devices=devices,
                    uuid_known=known,
                )
            )

    return ClusterNode(
        name=name,
        labels=labels,
        annotations=annotations,
        taints=tuple(
            Taint(key=t.get("key", ""), value=t.get("value") or "", effect=t.get("effect", "NoSchedule"))
            for t in spec.get("taints") or []
        ),
        ready=_condition_true(status, "Ready"),
        unschedulable=bool(spec.get("unschedulable", False)),
        cpu_allocatable_milli=cpu_milli,
        memory_allocatable_mib=memory_mib,
        allocatable=allocatable,
        gpus=tuple(gpus),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def pod_gpu_requests(obj: dict[str, Any]) -> dict[str, int]:
    """GPU resources a pod asks for, summed over its containers (limits win over requests, as for extended resources)."""
    totals: dict[str, int] = {}
    for container in (obj.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for key, value in merged.items():
            if _is_gpu_resource(key):
                totals[key] = totals.get(key, 0) + int(parse_quantity(value))
    return {k: v for k, v in totals.items() if v > 0}


def _host_request(resources: dict[str, Any], name: str) -> Decimal:
    """One container's request of ``name`` (cpu / memory): its request, else its limit (which
    Kubernetes then takes as the request), else 0."""
    value = (resources.get("requests") or {}).get(name)
    if value is None:
        value = (resources.get("limits") or {}).get(name)
    return Decimal(0) if value is None else parse_quantity(value)


def pod_host_requests(obj: dict[str, Any]) -> tuple[int, int]:
    """The pod's CPU (milli) and memory (MiB, rounded up) requests as kube-scheduler's
    NodeResourcesFit counts them: the containers' summed, or the largest init container's if
    more, plus the pod's overhead."""
    spec = obj.get("spec") or {}
    totals = []
    for name in ("cpu", "memory"):
        running = sum((_host_request(c.get("resources") or {}, name) for c in spec.get("containers") or []),
                      Decimal(0))
        init = max((_host_request(c.get("resources") or {}, name) for c in spec.get("initContainers") or []),
                   default=Decimal(0))
        overhead = (spec.get("overhead") or {}).get(name)
        totals.append(max(running, init) + (parse_quantity(overhead) if overhead is not None else 0))
    return math.ceil(totals[0] * 1000), math.ceil(totals[1] / 2**20)


def parse_pod(obj: dict[str, Any]) -> ClusterPod | None:
    """A Pod object -> ClusterPod, or None when it neither requests a GPU resource nor holds CPU
    or memory on a node (every bound pod's requests count against its node, GPU or not)."""
    requests = pod_gpu_requests(obj)
    spec = obj.get("spec") or {}
    cpu_milli, memory_mib = pod_host_requests(obj)
    if not requests and not (spec.get("nodeName") and (cpu_milli or memory_mib)):
        return None
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    owners = meta.get("ownerReferences") or []
    return ClusterPod(
        namespace=meta.get("namespace", "default"),
        name=meta["name"],
        node_name=spec.get("nodeName") or "",
        phase=status.get("phase", "Pending"),
        ready=_condition_true(status, "Ready"),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        gpu_requests=requests,
        cpu_request_milli=cpu_milli,
        memory_request_mib=memory_mib,
        priority_class_name=spec.get("priorityClassName") or "",
        owner_kind=owners[0].get("kind", "") if owners else "",
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _int_or_percent(value: Any) -> int | str | None:
    if value is None or isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.isdigit() else text


def parse_configmap(obj: dict[str, Any]) -> ClusterConfigMap:
    """A v1 ConfigMap as ``ClusterConfigMap`` (its text ``data``; binaryData is not gpuplane's)."""
    metadata = obj.get("metadata") or {}
    return ClusterConfigMap(
        namespace=str(metadata.get("namespace", "")), name=str(metadata.get("name", "")),
        data={str(k): str(v) for k, v in (obj.get("data") or {}).items()},
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        resource_version=str(metadata.get("resourceVersion") or ""),
    )


def parse_pdb(obj: dict[str, Any]) -> ClusterPDB:
    """A policy/v1 PodDisruptionBudget as ``ClusterPDB``. Only matchLabels are kept: a selector
    with matchExpressions alone then selects every pod of its namespace, which can only make a
    budget tighter than it is (an empty selector does select every pod in policy/v1)."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    selector = spec.get("selector") or {}
    return ClusterPDB(
        namespace=str(metadata.get("namespace", "")), name=str(metadata.get("name", "")),
        match_labels={str(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()},
        min_available=_int_or_percent(spec.get("minAvailable")),
        max_unavailable=_int_or_percent(spec.get("maxUnavailable")),
    )


def parse_token_review(obj: dict[str, Any]) -> TokenReview:
    """An authentication.k8s.io/v1 TokenReview's `status`; a missing or malformed one reads as not
    authenticated (never as someone)."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return TokenReview(authenticated=False, error="the review has no status")
    user: dict[str, Any] = status["user"] if isinstance(status.get("user"), dict) else {}
    extra: dict[str, Any] = user["extra"] if isinstance(user.get("extra"), dict) else {}
    return TokenReview(
        authenticated=status.get("authenticated") is True,
        username=str(user.get("username") or ""),
        groups=tuple(str(group) for group in user.get("groups") or ()),
        audiences=tuple(str(audience) for audience in status.get("audiences") or ()),
        extra={str(key): tuple(str(v) for v in values) for key, values in extra.items() if isinstance(values, list)},
        error=str(status.get("error") or ""),
    )
