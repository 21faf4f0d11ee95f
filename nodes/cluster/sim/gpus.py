"""The simulated GPUs themselves: deterministic UUIDs, catalog lookup and the MIG layout a node shows.

GPU and MIG UUIDs are derived from the node name by uuid5, so a node always gets the same ones
(in every process, across resets). A node's MIG layout is kept where gpuplane reads it on a real
cluster: the `gpuplane.io/mig-layout` node annotation.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

from nodes.catalog import GPUModel, UnknownGPUProduct, lookup_product
from nodes.contract import ANNOTATION_MIG_LAYOUT

# Namespace of the deterministic GPU and MIG UUIDs: the same node name always gets the same UUIDs.
UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "simulated-cluster.gpuplane.io")


def gpu_uuid(node: str, index: int) -> str:
    """The simulated UUID of GPU `index` on `node` ("GPU-" + uuid5)."""
    return f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{node}/{index}')}"


def mig_uuid(node: str, index: int, profile: str, start: int) -> str:
    """The simulated UUID of the MIG instance `profile` at memory slice `start` of GPU `index`."""
    return f"MIG-{uuid.uuid5(UUID_NAMESPACE, f'{node}/{index}/{profile}/{start}')}"


def catalog_model(product: str) -> GPUModel | None:
    """The catalog's model for a GFD product name, None for a product the catalog does not know."""
    try:
        return lookup_product(product)
    except UnknownGPUProduct:
        return None


def decode_layout(node: dict[str, Any]) -> dict[int, list[list[Any]]]:
    """The node's MIG layout, {gpu index: [[profile, start, size, uuid], ...]}; {} when no GPU has MIG enabled."""
    raw = (node["metadata"].get("annotations") or {}).get(ANNOTATION_MIG_LAYOUT)
    return {int(index): devices for index, devices in json.loads(raw).items()} if raw else {}


def encode_layout(node: dict[str, Any], layout: dict[int, list[list[Any]]]) -> None:
    """Store `layout` (as `decode_layout` returns it) on the node; an empty one removes the annotation."""
    annotations = node["metadata"].setdefault("annotations", {})
    if layout:
        annotations[ANNOTATION_MIG_LAYOUT] = json.dumps({str(i): layout[i] for i in sorted(layout)})
    else:
        annotations.pop(ANNOTATION_MIG_LAYOUT, None)
