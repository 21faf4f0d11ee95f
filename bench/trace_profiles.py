"""The trace replay of ``bench/trace_replay.py`` driven through the API's own scheduler.

Policies ``balanced`` and ``packing`` place each trace pod with ``Scheduler.schedule`` of the
named profile (``scheduler.core.profiles``) on a ``ClusterSnapshot``, as the API does: the same
filters, scores, normalisation, tie-break (``snapshot.tie_rank`` = the seed's node order) and
reservation. How the trace is expressed in the product's vocabulary:

- Every trace node is an ``mps-weighted`` node (its GPUs take any share, as the trace's GPU
  sharing does) with R = 16 clients per GPU (MPS's limit before compute capability 7.5); CPU and host memory are the node's allocatable,
  and the replay adds each placed pod's requests, as the adapter does from the database.
- A sharing pod (gpu_milli < 1000) asks ``sharing=mps-weighted, share_milli=gpu_milli``; a
  one-GPU pod asks ``share_milli=1000``. GPU memory is not in the trace: requests ask 1 MiB.
- Not expressible in the core today, so refused and counted in ``unexpressible``: CPU-only
  pods (``gpu_count`` must be >= 1) and multi-GPU pods (whole-GPU gangs go only to exclusive or
  MIG nodes). They are 13 % and 0.9 % of the default list's pods (0 % and 7.3 % of its GPU milli).
- The trace's GPU models are not in the product catalog. For the replay only, this module adds
  stand-ins to the in-process ``nodes.catalog.CATALOG`` (never to the catalog's source):

  | trace   | memory | FP16 TFLOPS | TDP W | note                                       |
  |---------|--------|-------------|-------|--------------------------------------------|
  | P100    | 16 GB  | 18.7        | 250   | P100 PCIe datasheet                        |
  | V100M16 | 16 GB  | 125         | 300   | V100 SXM2 16GB datasheet                   |
  | V100M32 | -      | -           | -     | the catalog's V100-SXM2-32GB                |
  | T4      | -      | -           | -     | the catalog's T4                           |
  | A10     | 24 GB  | 125         | 150   | A10 datasheet                              |
  | G2, G3  | 24 GB  | 125         | 250   | Alibaba-internal; assumed A10-class boards  |
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from nodes.catalog import CATALOG
from nodes.vocabulary import SharingMode
from scheduler.core.fragmentation import typical_pods
from scheduler.core.packing import PackNode, PackPod
from scheduler.core.profiles import PROFILES, scheduler_for
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import NodeState, PlacementRequest, SharingRequest, new_gpus

PROFILE_POLICIES = ("balanced", "packing")
REPLICAS = 16  # MPS serves at most 16 clients per GPU before compute capability 7.5
_STAND_INS = {  # trace model -> (catalog key, memory MiB, fp16 TFLOPS, TDP W); None = already there
    "P100": ("P100-PCIe-16GB", 16384, 18.7, 250),
    "V100M16": ("V100-SXM2-16GB", 16384, 125.0, 300),
    "A10": ("A10", 24576, 125.0, 150),
    "G2": ("G2", 24576, 125.0, 250),
    "G3": ("G3", 24576, 125.0, 250),
}
_CATALOG_KEYS = {"V100M32": "V100-SXM2-32GB", "T4": "T4"}


def catalog_key(trace_model: str) -> str:
    """The catalog key a trace GPU model replays as (registering its stand-in on first use)."""
    if trace_model in _CATALOG_KEYS:
        return _CATALOG_KEYS[trace_model]
    key, memory, tflops, tdp = _STAND_INS[trace_model]
    if key not in CATALOG:
        CATALOG[key] = dataclasses.replace(CATALOG["V100-SXM2-32GB"], key=key, name=f"replay {trace_model}",
                                           memory_mib=memory, fp16_tflops=tflops, tdp_w=tdp, gfd_products=())
    return key


def node_states(nodes: Iterable[PackNode]) -> list[NodeState]:
    return [NodeState(name=n.name, gpu_model=catalog_key(n.gpu_model), sharing_mode=SharingMode.MPS_WEIGHTED,
                      gpus=new_gpus(catalog_key(n.gpu_model), n.gpu_count), sharing_replicas=REPLICAS,
                      labels={"kubernetes.io/hostname": n.name}, cpu_allocatable_milli=n.cpu_milli,
                      memory_allocatable_mib=n.memory_mib)
            for n in nodes if n.gpu_count]


def typical_share_pods(pods: Iterable[PackPod]) -> list[dict[str, float]]:
    """The observed workload's typical GPU pods in FragmentationGradient's argument form (CPU-only
    classes left out: they count every free milli as fragment wherever they go, so they shift
    every node's gradient alike)."""
    weights: dict[tuple[int, int], float] = {}
    for c in typical_pods((p.cpu_milli, p.gpu_milli, p.gpu_count, p.gpu_models) for p in pods):
        if c.gpu_count:
            weights[(c.gpu_milli, c.gpu_count)] = weights.get((c.gpu_milli, c.gpu_count), 0.0) + c.weight
    return [{"share_milli": milli, "gpu_count": count, "weight": weight} for (milli, count), weight in weights.items()]


def profile_data(policy: str, typical: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """The named built-in profile, its FragmentationGradient given the trace's typical pods
    (what the adapter passes from the observed workload)."""
    data: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in PROFILES[policy].items()}
    if "FragmentationGradient" in data["scores"]:
        args = dict(data.get("plugin_args") or {})
        args["FragmentationGradient"] = {"typical_pods": typical}
        data["plugin_args"] = args
    return {policy: data}


class ProfileReplayer:
    """Places trace pods one by one with a profile's ``Scheduler`` on a snapshot of the trace nodes."""

    def __init__(self, policy: str, nodes: list[PackNode], typical: list[dict[str, float]]) -> None:
        # ``nodes`` come in the seed's shuffled order: the snapshot's default tie rank.
        self.snapshot = ClusterSnapshot(node_states(nodes))
        self.scheduler = scheduler_for(policy, profile_data(policy, typical))
        self.unexpressible = 0
        self.elapsed = 0.0
        self._number = 0

    def place(self, pod: PackPod) -> bool:
        if pod.gpu_count != 1:
            self.unexpressible += 1
            return False
        self._number += 1
        request = PlacementRequest(key=f"trace/{self._number}", memory_mib=1, sharing=SharingRequest.MPS_WEIGHTED,
                                   share_milli=pod.gpu_milli, cpu_milli=pod.cpu_milli,
                                   gpu_models=tuple(catalog_key(m) for m in pod.gpu_models),
                                   host_memory_mib=pod.memory_mib)
        start = time.perf_counter()
        result = self.scheduler.schedule(request, self.snapshot)
        assignment = result.assignment
        if assignment is not None:
            i = self.snapshot.index[assignment.node]
            node = self.snapshot.nodes[i]
            node.cpu_requested_milli += pod.cpu_milli
            node.memory_requested_mib += pod.memory_mib
            self.snapshot.update_node(node)
        self.elapsed += time.perf_counter() - start
        return assignment is not None
