"""Idle detection and per-node telemetry summaries (seed 004), and the node finder built on them.

A GPU is *idle* when its latest telemetry says it is barely used: utilization below a threshold
(default settings.IDLE_UTILIZATION_PCT, 30 %) and memory used below a threshold share of its
memory (default settings.IDLE_MEMORY_PCT, 50 %). A GPU that has never reported is judged by what
gpuplane handed out instead: idle exactly when nothing is allocated on it. "Idle" is a measured
state, not free capacity: a GPU whose workload is quiet is idle although it is allocated.

Everything here reads the latest values kept on GPU rows (kept by nodes.telemetry), never the
sample tables, so a summary of the whole cluster costs two queries whatever its size.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.db.models import F, Q, QuerySet, Value
from django.db.models.lookups import LessThan

from nodes.models import GPU, Node

# Only the columns that idle detection and summaries read: a cluster of 10,000 GPUs is summarised
# on every /metrics scrape, so loading whole rows would be wasted work.
_GPU_FIELDS = (
    "id", "node_id", "index", "uuid", "memory_mib", "allocated_milli", "allocated_memory_mib",
    "utilization_pct", "memory_used_mib", "sampled_at",
)


class GPULike(Protocol):
    """What idle detection reads from a GPU (a GPU row satisfies it)."""

    memory_mib: int
    allocated_milli: int
    allocated_memory_mib: int
    utilization_pct: float | None
    memory_used_mib: int | None


def has_telemetry(gpu: GPULike) -> bool:
    """True when a collector has reported utilization or memory used for this GPU."""
    return gpu.utilization_pct is not None or gpu.memory_used_mib is not None


def memory_used_pct(gpu: GPULike) -> float | None:
    """Memory used as a percentage of the GPU's memory; None when unknown or the size is 0."""
    if gpu.memory_used_mib is None or not gpu.memory_mib:
        return None
    return gpu.memory_used_mib * 100 / gpu.memory_mib


def is_idle(gpu: GPULike, utilization_threshold: float | None = None, memory_threshold: float | None = None) -> bool:
    """Whether `gpu` is idle by the seed 004 rule.

    With telemetry: every reported figure is under its threshold: utilization_pct <
    `utilization_threshold` and memory used < `memory_threshold` % of `memory_mib` (a figure the
    collector could not read, e.g. NVML "not supported", does not count against idleness).
    Without telemetry: idle exactly when nothing is allocated on the GPU (no compute share and no
    memory handed out). Thresholds default to settings.IDLE_UTILIZATION_PCT / IDLE_MEMORY_PCT.
    """
    if utilization_threshold is None:
        utilization_threshold = settings.IDLE_UTILIZATION_PCT
    if memory_threshold is None:
        memory_threshold = settings.IDLE_MEMORY_PCT
    if not has_telemetry(gpu):
        return gpu.allocated_milli == 0 and gpu.allocated_memory_mib == 0
    if gpu.utilization_pct is not None and gpu.utilization_pct >= utilization_threshold:
        return False
    memory_pct = memory_used_pct(gpu)
    return memory_pct is None or memory_pct < memory_threshold


def count_idle(gpus: Iterable[GPULike]) -> int:
    """How many of `gpus` is_idle() calls idle: the one count the overview, the node finder and
    /metrics (gpuplane_gpus_idle) all show, so they can never disagree."""
    # Thresholds read once: settings lookups per GPU cost more than the rule itself at 40,000 GPUs.
    utilization, memory = settings.IDLE_UTILIZATION_PCT, settings.IDLE_MEMORY_PCT
    return sum(1 for gpu in gpus if is_idle(gpu, utilization, memory))


def is_allocated(gpu: GPULike) -> bool:
    """Whether anything is handed out on `gpu` (a compute share or memory): what /metrics counts
    as gpuplane_gpus_allocated and the overview as "with work allocated"."""
    return gpu.allocated_milli > 0 or gpu.allocated_memory_mib > 0


def allocated_filter() -> Q:
    """is_allocated() as a filter on GPU rows, for counting in SQL (`Count("id", filter=...)`)."""
    return Q(allocated_milli__gt=0) | Q(allocated_memory_mib__gt=0)


def idle_filter(utilization_threshold: float | None = None, memory_threshold: float | None = None) -> Q:
    """is_idle() as a filter on GPU rows: the same rule, for counting in SQL what count_idle() counts.

    Memory used under the threshold share is compared as `memory_used_mib * 100 < threshold *
    memory_mib`, the division multiplied out (integer MiB: no quotient is near enough to the
    threshold for is_idle()'s float division to round across it).
    """
    if utilization_threshold is None:
        utilization_threshold = settings.IDLE_UTILIZATION_PCT
    if memory_threshold is None:
        memory_threshold = settings.IDLE_MEMORY_PCT
    no_telemetry = Q(utilization_pct__isnull=True, memory_used_mib__isnull=True)
    quiet = Q(utilization_pct__isnull=True) | Q(utilization_pct__lt=utilization_threshold)
    memory_low = Q(memory_used_mib__isnull=True) | Q(memory_mib=0) | Q(
        LessThan(F("memory_used_mib") * 100, Value(float(memory_threshold)) * F("memory_mib"))
    )
    return (no_telemetry & Q(allocated_milli=0, allocated_memory_mib=0)) | (~no_telemetry & quiet & memory_low)


# Nodes are counted in exactly one state so that the states add up to the node count.
NODE_STATES = ("ready", "cordoned", "notready")


class NodeFlags(Protocol):
    """What node_state reads (a Node satisfies it, and so does any row with these two fields)."""

    @property
    def ready(self) -> bool: ...

    @property
    def cordoned(self) -> bool: ...


def node_state(node: NodeFlags) -> str:
    """"notready" when not Ready (cordoned or not), else "cordoned" when cordoned, else "ready"."""
    if not node.ready:
        return "notready"
    return "cordoned" if node.cordoned else "ready"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class NodeSummary:
    """One node's GPUs in figures, as the node finder and /metrics see them.

    `allocatable_gpus`: GPUs with nothing allocated, counted only on schedulable (ready and not
    cordoned) nodes, 0 elsewhere. `idle_gpus`: GPUs that is_idle() calls idle, on any node.
    `mean_utilization_pct` / `mean_memory_used_pct`: means over the GPUs that reported that
    figure; None when none did. `oldest_sampled_at` / `newest_sampled_at`: the stalest and the
    freshest GPU report (None without telemetry), so a half-silent node shows.
    """

    name: str
    ready: bool
    cordoned: bool
    gpus: int
    allocatable_gpus: int
    idle_gpus: int
    reporting_gpus: int
    mean_utilization_pct: float | None
    mean_memory_used_pct: float | None
    oldest_sampled_at: datetime | None
    newest_sampled_at: datetime | None

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.cordoned

    @property
    def has_telemetry(self) -> bool:
        return self.reporting_gpus > 0


def summarize_node(
    node: Node, gpus: list[GPU], utilization_threshold: float | None = None, memory_threshold: float | None = None
) -> NodeSummary:
    """Summarise `node` from its GPU rows (passed in, so callers control the queries)."""
    reporting = [gpu for gpu in gpus if has_telemetry(gpu)]
    sampled = [gpu.sampled_at for gpu in gpus if gpu.sampled_at is not None]
    utilizations = [gpu.utilization_pct for gpu in gpus if gpu.utilization_pct is not None]
    memory_pcts = [pct for pct in (memory_used_pct(gpu) for gpu in gpus) if pct is not None]
    allocatable = sum(1 for gpu in gpus if not is_allocated(gpu))
    return NodeSummary(
        name=node.name,
        ready=node.ready,
        cordoned=node.cordoned,
        gpus=len(gpus),
        allocatable_gpus=allocatable if node.schedulable else 0,
        idle_gpus=sum(1 for gpu in gpus if is_idle(gpu, utilization_threshold, memory_threshold)),
        reporting_gpus=len(reporting),
        mean_utilization_pct=_mean(utilizations),
        mean_memory_used_pct=_mean(memory_pcts),
        oldest_sampled_at=min(sampled, default=None),
        newest_sampled_at=max(sampled, default=None),
    )


def node_summaries(
    nodes: QuerySet[Node] | None = None,
    utilization_threshold: float | None = None,
    memory_threshold: float | None = None,
) -> list[NodeSummary]:
    """A NodeSummary for each node of `nodes` (default: all), ordered by name. Two queries in all."""
    node_list = list((Node.objects.all() if nodes is None else nodes).order_by("name"))
    by_node: dict[int, list[GPU]] = {node.pk: [] for node in node_list}
    gpu_rows = GPU.objects.filter(node__in=[node.pk for node in node_list]).only(*_GPU_FIELDS).order_by("node_id", "index")
    for gpu in gpu_rows:
        by_node[gpu.node_id].append(gpu)
    return [summarize_node(node, by_node[node.pk], utilization_threshold, memory_threshold) for node in node_list]


def find_best_node_for_deployment(
    required_gpus: int, utilization_threshold: float | None = None, memory_threshold: float | None = None
) -> NodeSummary | None:
    """The node where a deployment needing `required_gpus` GPUs fits best by telemetry, or None.

    Seed 004's rule. Only ready, uncordoned nodes are considered; a node qualifies when its idle
    GPUs (is_idle(); a GPU without telemetry is idle when nothing is allocated on it, so a node
    without metrics offers its allocatable GPUs) are at least `required_gpus`. Among those, the
    best has the most idle GPUs, then the lowest mean utilization (a node that reports none counts
    as 0 %: nothing is known to run there), then the smallest name, so the answer is
    deterministic. Thresholds default to settings.IDLE_UTILIZATION_PCT (30) / IDLE_MEMORY_PCT (50).
    Raises ValueError when `required_gpus` < 1.
    """
    if required_gpus < 1:
        raise ValueError(f"required_gpus must be at least 1, got {required_gpus}")
    candidates = [
        summary
        for summary in node_summaries(Node.objects.filter(ready=True, cordoned=False), utilization_threshold, memory_threshold)
        if summary.idle_gpus >= required_gpus
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda s: (-s.idle_gpus, s.mean_utilization_pct or 0.0, s.name))
