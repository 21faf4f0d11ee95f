"""The trace replay of ``bench/trace_replay.py`` driven through the API's own scheduler.

Policies ``balanced`` and ``packing`` place each trace pod with ``Scheduler.schedule`` of the
named profile (``scheduler.core.profiles``) on a ``ClusterSnapshot``, as the API does: the same
filters, scores, normalisation, tie-break (``snapshot.tie_rank`` = the seed's node order) and
reservation (CapacityReserve holds the pod's GPU share, CPU and host memory). How the trace is
expressed in the product's vocabulary:

- Every trace node is an ``mps-weighted`` node (its GPUs take any share, as the trace's GPU
  sharing does) with R = 16 clients per GPU (MPS's limit before compute capability 7.5); CPU
  and host memory are the node's allocatable.
- A sharing pod (gpu_milli < 1000) asks ``sharing=mps-weighted, share_milli=gpu_milli``; a
  one-GPU pod ``share_milli=1000``; a multi-GPU pod ``gpu_count`` whole GPUs (a weighted node
  gives a gang untouched GPUs, 100 % of each); a CPU-only pod ``gpu_count=0`` (it holds CPU
  and memory only, as other teams' pods do). GPU memory is not in the trace: requests ask 1 MiB
  per GPU. Every pod of every list is expressible (``unexpressible`` stays 0).
- The observed workload is the pod list, as FGD's typical pods are: FragmentationGradient gets
  the list's typical pods (``typical_pods``: CPU, share, GPU count and models, 95 % coverage)
  and SharingPlan the list's sharing plan (``SharingPlan.build`` over its sharing pods), as
  ``plugin_args``: what the workload-mix task gives the API's profiles in production.
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
from scheduler.core.packing_plan import best_fit_decreasing
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


def workload_args(pods: Iterable[PackPod]) -> dict[str, dict[str, Any]]:
    """The packing plugins' arguments for a pod list as the observed workload: FragmentationGradient's
    typical pods and SharingPlan's planned GPU contents."""
    listed = list(pods)
    typical = [{"share_milli": c.gpu_milli, "gpu_count": c.gpu_count, "cpu_milli": c.cpu_milli,
                "gpu_models": [catalog_key(m) for m in c.gpu_models], "weight": c.weight}
               for c in typical_pods((p.cpu_milli, p.gpu_milli if p.gpu_count else 0, p.gpu_count, p.gpu_models)
                                     for p in listed)]
    patterns = [list(pattern) for pattern in best_fit_decreasing(p.gpu_milli for p in listed if p.sharing)]
    return {"FragmentationGradient": {"typical_pods": typical}, "SharingPlan": {"patterns": patterns}}


def profile_data(policy: str, workload: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The named built-in profile, its packing plugins given the list's workload (what the adapter
    passes from the observed workload)."""
    data: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in PROFILES[policy].items()}
    args = dict(data.get("plugin_args") or {})
    for name, value in workload.items():
        if name in data["scores"]:
            args[name] = value
    data["plugin_args"] = args
    return {policy: data}


def request_for(pod: PackPod, number: int) -> PlacementRequest:
    """The product's request for one trace pod (see the module docstring)."""
    if pod.gpu_count == 0:
        return PlacementRequest(key=f"trace/{number}", memory_mib=0, gpu_count=0, cpu_milli=pod.cpu_milli,
                                host_memory_mib=pod.memory_mib)
    return PlacementRequest(key=f"trace/{number}", memory_mib=pod.gpu_count, gpu_count=pod.gpu_count,
                            sharing=SharingRequest.MPS_WEIGHTED,
                            share_milli=pod.gpu_milli if pod.gpu_count == 1 else None, cpu_milli=pod.cpu_milli,
                            gpu_models=tuple(catalog_key(m) for m in pod.gpu_models),
                            host_memory_mib=pod.memory_mib)


class ProfileReplayer:
    """Places trace pods one by one with a profile's ``Scheduler`` on a snapshot of the trace nodes."""

    def __init__(self, policy: str, nodes: list[PackNode], workload: dict[str, dict[str, Any]]) -> None:
        # ``nodes`` come in the seed's shuffled order: the snapshot's default tie rank.
        self.snapshot = ClusterSnapshot(node_states(nodes))
        self.scheduler = scheduler_for(policy, profile_data(policy, workload))
        self.unexpressible = 0
        self.elapsed = 0.0
        self._number = 0

    def place(self, pod: PackPod) -> bool:
        """Offer one pod; False when it fits nowhere, or when the core cannot take the request at
        all (counted in ``unexpressible``)."""
        self._number += 1
        request = request_for(pod, self._number)
        start = time.perf_counter()
        try:
            result = self.scheduler.schedule(request, self.snapshot)
        except ValueError:  # a request the core refuses to size (build_need / sizing)
            self.unexpressible += 1
            return False
        finally:
            self.elapsed += time.perf_counter() - start
        return result.assignment is not None
