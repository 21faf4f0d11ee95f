"""OME InferenceServices (ome.io/v1beta1): their GPU count from the engine's tensor-parallel size,
and the pod their engine amounts to (what the webhook and the dry run decide for).

The template gpuplane renders is ``scheduler.workloads.inference_service_manifest``: required node
affinity on kubernetes.io/hostname of the chosen node, none when GPU selection is off (the
WorkloadSpec then names no node).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from nodes.contract import RESOURCE_GPU, RESOURCE_PREFIX_NVIDIA

# sglang's --tp-size, vLLM's --tensor-parallel-size aside, and the spellings seed 004 accepts.
_TP_FLAG = re.compile(r"^--?(tp-size|tp_size|tpsize)(=(?P<value>\d+))?$")
TP_ENV = ("TP_SIZE", "TPSIZE")


def tp_size(args: Iterable[Any], env: Iterable[Any] = ()) -> int | None:
    """The tensor-parallel size stated by ``--tp-size N``, ``--tp_size=N``, ``--tpsize N`` (or a
    TP_SIZE / TPSIZE variable); None when none is stated."""
    words = [str(a) for a in args]
    for position, word in enumerate(words):
        match = _TP_FLAG.match(word)
        if match:
            value = match.group("value") or (words[position + 1] if position + 1 < len(words) else "")
            if value.isdigit() and int(value) > 0:
                return int(value)
    for item in env:
        if isinstance(item, dict) and str(item.get("name", "")).upper() in TP_ENV and str(item.get("value", "")).isdigit():
            return int(item["value"]) or None
    return None


def engine_pod(service: dict[str, Any]) -> dict[str, Any]:
    """The pod an InferenceService's engine runs: its runner container, asking for ``tp_size`` GPUs
    when it states no nvidia.com/* resource itself."""
    meta = service.get("metadata") or {}
    engine = ((service.get("spec") or {}).get("engine") or {})
    runner = dict(engine.get("runner") or {})
    runner.setdefault("name", "ome-container")
    resources = dict(runner.get("resources") or {})
    limits = dict(resources.get("limits") or {})
    if not any(str(k).startswith(RESOURCE_PREFIX_NVIDIA) for k in limits):
        limits[RESOURCE_GPU] = str(tp_size([*(runner.get("command") or []), *(runner.get("args") or [])],
                                           runner.get("env") or []) or 1)
    resources["limits"] = limits
    runner["resources"] = resources
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": str(meta.get("name") or "inference-service"),
                     "namespace": str(meta.get("namespace") or "default"),
                     "labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})},
        "spec": {"containers": [runner]},
    }
